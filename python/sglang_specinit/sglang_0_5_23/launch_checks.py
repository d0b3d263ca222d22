"""The launcher-side launch checks on sglang 0.5.23: read the resolved flags, call the core.

BEFORE ``ServerArgs.check_server_args`` (``server_args.py:508``): 0.5.23's own argument
validation, which ``Engine._launch_subprocesses`` (``entrypoints/engine.py:1165``) runs in the
launcher right after ``resolve_once()`` and before anything is published or spawned.

0.5.23's ``ServerArgs`` keeps the caller's input in its fields and what resolution decided
(automatic fraction, page size, NEXTN -> EAGLE, a Gemma 4 assistant promoted to FROZEN_KV_MTP,
a path-less MTP draft defaulted to the target's checkpoint, a ModelScope or GGUF hub id
replaced by its local path) in declarations on top; ``resolving_view`` is how 0.5.23's own
``check_server_args`` reads the result, so the checks read it the same way. The checks and
their messages are release-independent (:mod:`sglang_specinit.launch_checks`).
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.launch_checks import check_speculative_launch
from sglang_specinit.patch_table import PatchTable

_OVERRIDES = "sglang.srt.arg_groups.overrides"
patch = PatchTable("sglang.srt.server_args")


@patch.before("ServerArgs.check_server_args", params=())
@patch.calls("resolving_view", module=_OVERRIDES)
def check_launch(server_args: Any) -> None:
    """BEFORE ``ServerArgs.check_server_args``: the shared checks on the resolved flags."""
    from sglang.srt.arg_groups.overrides import resolving_view

    cfg = resolving_view(server_args)
    if cfg.speculative_algorithm is None:
        return
    # The draft runner loads with --speculative-draft-load-format when given
    # (ModelRunner._resolve_draft_load_format), else with --load-format.
    check_speculative_launch(
        algorithm=cfg.speculative_algorithm,
        mem_fraction_static=cfg.mem_fraction_static,
        max_total_tokens=cfg.max_total_tokens,
        page_size=cfg.page_size,
        model_path=cfg.model_path,
        draft_path=cfg.speculative_draft_model_path,
        draft_load_format=cfg.speculative_draft_load_format or cfg.load_format,
    )


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
