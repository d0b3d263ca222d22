"""The automatic ``--mem-fraction-static`` without 0.5.13's flat 4/6 GB draft reserve, which only
wastes memory once the phased init budgets the draft (0.5.14 removed it too). The method runs
unchanged (it also builds the graph batch lists); only its fraction is replaced, and restored if
the scheduler declines the launch.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable
from typing import Any

from sglang_specinit.patch_table import PatchTable
from sglang_specinit.sglang_0_5_13.state import logger_disabled

logger = logging.getLogger(__name__)

MODULE = "sglang.srt.server_args"
SPEC_HOOK_MODULE = "sglang.srt.arg_groups.speculative_hook"
patch = PatchTable(MODULE)

# Set on ServerArgs when the reserve was dropped: the fraction stock would have used.
STOCK_FRACTION_ATTR = "_specinit_stock_mem_fraction_static"


def fraction_without_draft_reserve(
    handle_gpu_memory_settings: Callable[..., Any], server_args: Any, gpu_mem: Any
) -> float:
    """SGLang's heuristic on a copy hiding the algorithm; containers are copied too, so nothing
    it changes in place reaches the original."""
    trial = copy.copy(server_args)
    for name, value in vars(server_args).items():
        if isinstance(value, list | dict | set):
            setattr(trial, name, copy.copy(value))
    trial.speculative_algorithm = None
    trial.mem_fraction_static = None
    with logger_disabled(type(server_args).__module__):
        handle_gpu_memory_settings(trial, gpu_mem)
    return float(trial.mem_fraction_static)


@patch.around("ServerArgs._handle_gpu_memory_settings", params=("gpu_mem",))
def handle_gpu_memory_settings(original: Any, self: Any, gpu_mem: Any) -> Any:
    automatic = self.mem_fraction_static is None
    result = original(self, gpu_mem)
    if not automatic or self.speculative_algorithm is None:
        return result
    from sglang_specinit.sglang_0_5_13.launch_policy import (
        facts_from_server_args,
        phasing_blocker,
    )

    if phasing_blocker(facts_from_server_args(self)) is not None:
        return result  # stock init: stock's reserve stays
    stock = self.mem_fraction_static
    self.mem_fraction_static = fraction_without_draft_reserve(original, self, gpu_mem)
    setattr(self, STOCK_FRACTION_ATTR, stock)
    logger.info(
        "[specinit] automatic --mem-fraction-static %s (stock %s: its flat draft reserve is "
        "replaced by the draft's real size inside the budget)",
        self.mem_fraction_static,
        stock,
    )
    return result


def restore_stock_fraction(server_args: Any) -> float | None:
    stock = getattr(server_args, STOCK_FRACTION_ATTR, None)
    if stock is not None:
        server_args.mem_fraction_static = stock
        delattr(server_args, STOCK_FRACTION_ATTR)
    return stock


@patch.before("handle_speculative_decoding", module=SPEC_HOOK_MODULE)
def check_draft_path(server_args: Any) -> None:
    """Otherwise a missing draft config surfaces as transformers' "Unrecognized model"."""
    path = getattr(server_args, "speculative_draft_model_path", None)
    if path and os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json")):
        raise ValueError(
            f"--speculative-draft-model-path {path!r} has no config.json: point it at the draft "
            "checkpoint directory (config.json plus weights) or at its hub id"
        )


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
