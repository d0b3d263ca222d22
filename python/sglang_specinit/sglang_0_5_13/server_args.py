"""The automatic ``--mem-fraction-static`` without the flat draft reserve (sglang 0.5.13.x).

Wraps ``ServerArgs._handle_gpu_memory_settings`` (AROUND) and
``arg_groups.speculative_hook.handle_speculative_decoding`` (BEFORE).

When ``--mem-fraction-static`` is not given, 0.5.13.x lowers it by a flat 4 GB (6 GB for
STANDALONE) to leave room for a draft it does not budget. Once the phased init budgets the draft
inside the fraction, that reserve only wastes memory (upstream 0.5.14 removed the same term).
The wrapped method also generates the CUDA-graph batch lists and other sizes from the
speculative algorithm, so it runs unchanged; only its fraction is replaced, by the one the same
method computes for a launch without that reserve term. Whether a launch is phased is
``launch_policy.phasing_blocker``'s answer, the one the scheduler acts on; should the scheduler
still decline the launch, it restores the stock fraction recorded here.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

from sglang_specinit.patch_table import PatchTable

logger = logging.getLogger(__name__)

MODULE = "sglang.srt.server_args"
SPEC_HOOK_MODULE = "sglang.srt.arg_groups.speculative_hook"
patch = PatchTable(MODULE)

# Set on ServerArgs when the reserve was dropped: the fraction stock would have used.
STOCK_FRACTION_ATTR = "_specinit_stock_mem_fraction_static"


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """Silence a logger for a trial run whose messages the real run already printed."""
    target = logging.getLogger(logger_name)
    disabled = target.disabled
    target.disabled = True
    try:
        yield
    finally:
        target.disabled = disabled


def fraction_without_draft_reserve(
    handle_gpu_memory_settings: Callable[..., Any], server_args: Any, gpu_mem: Any
) -> float:
    """The fraction SGLang's heuristic picks for this launch with no speculative term.

    Runs the heuristic on a copy of ``server_args`` that hides the algorithm (the heuristic's
    only other use of it is the CUDA-graph batch list, which the copy keeps to itself). Lists
    and dicts are copied too, so nothing the heuristic changes in place reaches the original.
    """
    trial = copy.copy(server_args)
    for name, value in vars(server_args).items():
        if isinstance(value, list | dict | set):
            setattr(trial, name, copy.copy(value))
    trial.speculative_algorithm = None
    trial.mem_fraction_static = None
    with _quiet(type(server_args).__module__):
        handle_gpu_memory_settings(trial, gpu_mem)
    return float(trial.mem_fraction_static)


@patch.around("ServerArgs._handle_gpu_memory_settings", params=("gpu_mem",))
def handle_gpu_memory_settings(original: Any, self: Any, gpu_mem: Any) -> Any:
    """AROUND hook: stock settings; then, for a phased launch, the reserve-free fraction."""
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
    """Put back the fraction stock would have used, for a launch the scheduler declined."""
    stock = getattr(server_args, STOCK_FRACTION_ATTR, None)
    if stock is not None:
        server_args.mem_fraction_static = stock
        delattr(server_args, STOCK_FRACTION_ATTR)
    return stock


@patch.before("handle_speculative_decoding", module=SPEC_HOOK_MODULE)
def check_draft_path(server_args: Any) -> None:
    """BEFORE ``handle_speculative_decoding``: a local draft directory must hold a config.

    SGLang reads the draft config there to resolve algorithm aliases; without this check a
    missing config surfaces as transformers' "Unrecognized model" with no hint at the flag.
    """
    path = getattr(server_args, "speculative_draft_model_path", None)
    if path and os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json")):
        raise ValueError(
            f"--speculative-draft-model-path {path!r} has no config.json: point it at the draft "
            "checkpoint directory (config.json plus weights) or at its hub id"
        )


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
