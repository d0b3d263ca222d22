"""Drop the flat speculative reserve from the auto ``--mem-fraction-static`` (sglang 0.5.13.x).

Wraps ``ServerArgs._handle_gpu_memory_settings``. When ``--mem-fraction-static`` is not given,
0.5.13.x lowers it by a flat 4 GB (6 GB for STANDALONE) to leave room for a draft it does not
budget. Once the phased init budgets the draft inside the fraction, that reserve only wastes
memory, so for algorithms the phased init handles the heuristic runs as for a plain launch
(the heuristic's only use of ``speculative_algorithm`` is that reserve). Upstream 0.5.14 removed
the same term.
"""

from __future__ import annotations

import os
from typing import Any

# Built-in algorithm names (as typed; the heuristic runs before SGLang resolves aliases) whose
# draft memory the phased init budgets. Plugin-registered algorithms keep the reserve unless
# their worker implements the phases, which cannot be known this early.
BUDGETED_ALGORITHMS = frozenset(
    {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "DFLASH", "FROZEN_KV_MTP", "NGRAM"}
)


def draft_is_budgeted(server_args: Any) -> bool:
    name = server_args.speculative_algorithm
    return name is not None and str(name).upper() in BUDGETED_ALGORITHMS


def handle_gpu_memory_settings(original: Any, self: Any, gpu_mem: Any) -> Any:
    if not draft_is_budgeted(self):
        return original(self, gpu_mem)
    algorithm = self.speculative_algorithm
    self.speculative_algorithm = None
    try:
        return original(self, gpu_mem)
    finally:
        self.speculative_algorithm = algorithm


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


HOOKS = (
    ("sglang.srt.server_args.ServerArgs._handle_gpu_memory_settings", handle_gpu_memory_settings),
)
BEFORE_HOOKS = (
    ("sglang.srt.arg_groups.speculative_hook.handle_speculative_decoding", check_draft_path),
)
NEW_METHODS = ()
