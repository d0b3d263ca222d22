"""The launcher-side launch checks for a dataclass ``ServerArgs`` whose fields hold the
resolved values (sglang 0.5.13.x to 0.5.15): read them, call :mod:`sglang_specinit.launch_checks`.

BEFORE ``ServerArgs.check_server_args``: SGLang's own argument validation, which
``Engine._launch_subprocesses`` runs in the launcher (``launch_server`` or ``sglang.Engine``)
once ``__post_init__`` has resolved the fraction, page size, parallel layout and algorithm
aliases into the fields themselves, and before any scheduler is spawned. The checks and their
messages are release-independent (:mod:`sglang_specinit.launch_checks`); this module only
says where those releases keep each value.
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.launch_checks import check_speculative_launch
from sglang_specinit.patch_table import PatchTable

patch = PatchTable("sglang.srt.server_args")


@patch.before("ServerArgs.check_server_args", params=())
def check_launch(server_args: Any) -> None:
    """BEFORE ``ServerArgs.check_server_args``: the shared checks on the resolved fields."""
    if getattr(server_args, "speculative_algorithm", None) is None:
        return
    # The draft loads with its own format when one is given (Scheduler.init_model_worker
    # copies it over --load-format for the draft worker).
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
