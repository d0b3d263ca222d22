"""Launch checks for a dataclass ``ServerArgs`` whose ``__post_init__`` resolved every field,
hooked before ``check_server_args``, which runs in the launcher before any scheduler exists."""

from __future__ import annotations

from typing import Any

from sglang_specinit.launch_checks import check_resolved_launch
from sglang_specinit.patch_table import PatchTable

patch = PatchTable("sglang.srt.server_args")


@patch.before("ServerArgs.check_server_args", params=())
def check_launch(server_args: Any) -> None:
    if getattr(server_args, "speculative_algorithm", None) is not None:
        check_resolved_launch(server_args)


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
