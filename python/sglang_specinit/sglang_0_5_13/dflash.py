"""DFLASH draft worker in phases (sglang 0.5.13 / 0.5.13.post1).

Adds ``DFlashWorker.alloc_memory_pool`` and ``DFlashWorker.init_backends``; its constructor
needs no hook: past the draft TpModelWorker (whose runner stops before its pool, see
``phases.model_runner``) it only reads draft config and weights.

0.5.13.x prices the DFLASH draft by scaling the target's per-token KV by ``(T + D) / T``, i.e.
at the target's geometry. Here the draft pool is priced at the draft runner's own geometry and
KV dtype and the scaled cell is never used: the phased target pool is sized from a token count
(``calculate_pool_sizes_from_max_tokens``), which ignores the configurator's cell.

The draft runner was built with a deep copy of the server args, which DFLASH installs as the
global server args for the length of the construction. Its pool and backend phases run under
the same global args, restored afterwards. With a compact draft window the draft keeps a private
req-to-token table (``req_to_token_pool=None``), as in the stock constructor.
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
