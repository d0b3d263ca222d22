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

0.5.18 keeps 0.5.15's dataclass ``ServerArgs``: ``__post_init__`` resolves into the fields and
ends with ``materialize_declarations`` (0.5.18 ``server_args.py:3788``), and
``check_server_args`` (``:9136``) runs after it, so there the checks read the fields, as the
core's
:mod:`~sglang_specinit.dataclass_args.launch_checks` does (``release_shims.has_resolving_view``;
``resolving_view`` is then required by ``release_shims.release_requires``, not here).
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.dataclass_args import launch_checks as field_launch_checks
from sglang_specinit.launch_checks import check_speculative_launch
from sglang_specinit.patch_table import PatchTable
from sglang_specinit.sglang_0_5_23.release_shims import has_resolving_view

patch = PatchTable("sglang.srt.server_args")


@patch.before("ServerArgs.check_server_args", params=())
def check_launch(server_args: Any) -> None:
    """BEFORE ``ServerArgs.check_server_args``: the shared checks on the resolved flags."""
    if not has_resolving_view():
        field_launch_checks.check_launch(server_args)
        return
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
