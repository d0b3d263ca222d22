"""DFLASH draft worker in phases (0.5.13 / 0.5.13.post1); its constructor needs no hook.

Stock prices the draft as the target's cell scaled by ``(T + D) / T``; here the draft pool is
priced at its own geometry. The pool and backend phases run under the draft's global server
args, as its construction did.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sglang_specinit.patch_table import PatchTable

MODULE = "sglang.srt.speculative.dflash_worker"
SERVER_ARGS_MODULE = "sglang.srt.server_args"
patch = PatchTable(MODULE)


@contextlib.contextmanager
@patch.calls(
    "get_global_server_args", "set_global_server_args_for_scheduler", module=SERVER_ARGS_MODULE
)
def _draft_global_server_args(worker: Any) -> Iterator[None]:
    from sglang.srt.server_args import (
        get_global_server_args,
        set_global_server_args_for_scheduler,
    )

    saved = get_global_server_args()
    set_global_server_args_for_scheduler(worker.draft_worker.server_args)
    try:
        yield
    finally:
        set_global_server_args_for_scheduler(saved)


@patch.adds("DFlashWorker")
def alloc_memory_pool(
    self: Any,
    memory_pool_config: Any = None,
    req_to_token_pool: Any = None,
    token_to_kv_pool_allocator: Any = None,
) -> None:
    shared_req_to_token_pool = None if self.use_compact_draft_cache else req_to_token_pool
    with _draft_global_server_args(self):
        self.draft_worker.alloc_memory_pool(
            memory_pool_config=memory_pool_config,
            req_to_token_pool=shared_req_to_token_pool,
            token_to_kv_pool_allocator=token_to_kv_pool_allocator,
        )


@patch.adds("DFlashWorker")
def init_backends(self: Any) -> None:
    with _draft_global_server_args(self):
        self.draft_worker.init_backends()


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
