"""Launch checks for a dataclass ``ServerArgs`` whose ``__post_init__`` resolved every field,
hooked before ``check_server_args``, which runs in the launcher before any scheduler exists."""

from __future__ import annotations

from typing import Any

from sglang_specinit.launch_checks import check_speculative_launch
from sglang_specinit.patch_table import PatchTable

patch = PatchTable("sglang.srt.server_args")


@patch.before("ServerArgs.check_server_args", params=())
def check_launch(server_args: Any) -> None:
    if getattr(server_args, "speculative_algorithm", None) is None:
        return
    # The draft's own format, when given, replaces --load-format for the draft worker.
    draft_format = getattr(server_args, "speculative_draft_load_format", None)
    check_speculative_launch(
        algorithm=server_args.speculative_algorithm,
        mem_fraction_static=server_args.mem_fraction_static,
        max_total_tokens=server_args.max_total_tokens,
        page_size=server_args.page_size,
        model_path=server_args.model_path,
        draft_path=getattr(server_args, "speculative_draft_model_path", None),
        draft_load_format=draft_format or getattr(server_args, "load_format", "auto"),
    )


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
