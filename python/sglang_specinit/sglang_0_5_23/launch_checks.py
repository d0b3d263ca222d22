"""BEFORE ``ServerArgs.check_server_args`` (run in the launcher before any rank starts): the
shared launch checks on what resolution decided, read through ``resolving_view`` as 0.5.23's
own checks read it; on the dataclass releases (0.5.16 - 0.5.18) the core's field checks.
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.dataclass_args import launch_checks as field_launch_checks
from sglang_specinit.launch_checks import check_resolved_launch
from sglang_specinit.patch_table import PatchTable
from sglang_specinit.sglang_0_5_23.release_shims import row

patch = PatchTable("sglang.srt.server_args")


@patch.before("ServerArgs.check_server_args", params=())
def check_launch(server_args: Any) -> None:
    if not row().resolving_view:
        field_launch_checks.check_launch(server_args)
        return
    from sglang.srt.arg_groups.overrides import resolving_view

    cfg = resolving_view(server_args)
    if cfg.speculative_algorithm is None:
        return
    check_resolved_launch(cfg)


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
