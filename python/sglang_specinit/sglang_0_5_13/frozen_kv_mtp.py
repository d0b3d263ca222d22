"""Frozen-KV MTP draft worker in phases (0.5.13 / 0.5.13.post1).

The draft reads the target's KV cache, so its constructor needs the target pool (0.5.14 solved
that by allocating the target pool first, leaving the draft weights out of the budget). Here the
draft loads with the others, binds the target pool in phase 3, and is charged exactly its
weights and its 64-token stand-in pool.
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.patch_table import PatchTable
from sglang_specinit.sglang_0_5_13 import tp_worker
from sglang_specinit.sglang_0_5_13.eagle import DRAFT_WORKER_PARAMS, construct_until
from sglang_specinit.sglang_0_5_13.model_runner import PROVISIONAL_SIZE
from sglang_specinit.sglang_0_5_13.state import deferring_pools

MODULE = "sglang.srt.speculative.frozen_kv_mtp_worker"
patch = PatchTable(MODULE)


def _module() -> Any:
    import sglang.srt.speculative.frozen_kv_mtp_worker as frozen_kv_mtp_worker

    return frozen_kv_mtp_worker


@patch.around("FrozenKVMTPWorker.__init__", params=DRAFT_WORKER_PARAMS)
@patch.calls(
    "FrozenKVMTPWorker._bind_kv_context",
    "FrozenKVMTPWorker._init_draft_attn_backend",
    "FrozenKVMTPWorker.init_cuda_graphs",
    "MemoryPoolConfig",
)
def init(original: Any, self: Any, *args: Any, **kwargs: Any) -> None:
    if not deferring_pools():
        return original(self, *args, **kwargs)
    target_worker = kwargs.get("target_worker", args[-1] if args else None)
    target_runner = target_worker.model_runner
    # The constructor copies the target's request count before any pool exists.
    target_runner.memory_pool_config = _module().MemoryPoolConfig(
        max_total_num_tokens=PROVISIONAL_SIZE, max_running_requests=PROVISIONAL_SIZE
    )
    try:
        construct_until(
            self, ("_bind_kv_context", "_init_draft_attn_backend"), original, args, kwargs
        )
    finally:
        target_runner.memory_pool_config = None


@patch.adds("FrozenKVMTPWorker")
def alloc_memory_pool(
    self: Any,
    memory_pool_config: Any = None,
    req_to_token_pool: Any = None,
    token_to_kv_pool_allocator: Any = None,
) -> None:
    mod = _module()
    self.memory_pool_config.max_running_requests = memory_pool_config.max_running_requests
    self.req_to_token_pool = req_to_token_pool
    self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
    with (
        mod.empty_context(),
        mod.speculative_moe_backend_context(),
        mod.speculative_moe_a2a_backend_context(),
    ):
        tp_worker.alloc_memory_pool(
            self, self.memory_pool_config, req_to_token_pool, token_to_kv_pool_allocator
        )
    self.kv_context = None
    if hasattr(self.draft_model_runner.model, "bind_frozen_kv_context"):
        self._bind_kv_context()


@patch.adds("FrozenKVMTPWorker")
@patch.calls(
    "empty_context",
    "draft_tp_context",
    "speculative_moe_backend_context",
    "speculative_moe_a2a_backend_context",
)
def init_backends(self: Any) -> None:
    mod = _module()
    with (
        mod.empty_context(),
        mod.speculative_moe_backend_context(),
        mod.speculative_moe_a2a_backend_context(),
    ):
        tp_worker.init_backends(self)
    self.draft_tp_context = (
        mod.draft_tp_context if self.server_args.enable_dp_attention else mod.empty_context
    )
    self.draft_attn_backend = self._init_draft_attn_backend()
    self.draft_model_runner.draft_attn_backend = self.draft_attn_backend
    self.cuda_graph_runner = None
    with (
        self.draft_tp_context(self.draft_model_runner.tp_group),
        mod.speculative_moe_backend_context(),
        mod.speculative_moe_a2a_backend_context(),
    ):
        self.init_cuda_graphs()


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
