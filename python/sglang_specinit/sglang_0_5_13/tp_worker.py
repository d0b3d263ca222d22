"""TpModelWorker in phases (0.5.13 / 0.5.13.post1): the constructor asserts on pool sizes the
runner does not have yet, so stand-ins live for the constructor only; ``alloc_memory_pool`` sets
the real values and re-checks them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from sglang_specinit.patch_table import PatchTable
from sglang_specinit.sglang_0_5_13.model_runner import clear_provisional_sizes
from sglang_specinit.sglang_0_5_13.state import deferring_pools

MODULE = "sglang.srt.managers.tp_worker"
CONSTRUCTOR_PARAMS = (
    "server_args", "gpu_id", "tp_rank", "moe_ep_rank", "pp_rank", "attn_cp_rank",
    "moe_dp_rank", "dp_rank", "nccl_port", "is_draft_worker", "req_to_token_pool",
    "token_to_kv_pool_allocator", "memory_pool_config", "is_multi_layer_eagle",
)  # fmt: skip
patch = PatchTable(MODULE)

POOL_DERIVED_ATTRS = (
    "max_total_num_tokens",
    "max_running_requests",
    "max_req_len",
    "max_req_input_len",
)


def runners_of(worker: Any) -> list[Any]:
    return list(worker.model_runner_list) or [worker.model_runner]


@patch.around("TpModelWorker.__init__", params=CONSTRUCTOR_PARAMS)
def init(original: Any, self: Any, *args: Any, **kwargs: Any) -> None:
    original(self, *args, **kwargs)
    if not deferring_pools():
        return
    for runner in runners_of(self):
        clear_provisional_sizes(runner)
    for name in POOL_DERIVED_ATTRS:
        self.__dict__.pop(name, None)
    self._specinit_pools_pending = True


def pool_method(body: Callable[[Any, Any, Any, Any], None]) -> Any:
    """An added ``alloc_memory_pool`` with 0.5.14's signature, running ``body`` on its three
    pool arguments."""

    @functools.wraps(body)
    def alloc_memory_pool(
        self: Any,
        memory_pool_config: Any = None,
        req_to_token_pool: Any = None,
        token_to_kv_pool_allocator: Any = None,
    ) -> None:
        body(self, memory_pool_config, req_to_token_pool, token_to_kv_pool_allocator)

    return alloc_memory_pool


@patch.adds("TpModelWorker")
@pool_method
def alloc_memory_pool(worker: Any, config: Any, req_pool: Any, allocator: Any) -> None:
    if req_pool is not None:
        worker.req_to_token_pool = req_pool
    if allocator is not None:
        worker.token_to_kv_pool_allocator = allocator
    if config is not None:
        worker.memory_pool_config = config
    for runner in runners_of(worker):
        if req_pool is not None:
            runner.req_to_token_pool = req_pool
        if allocator is not None:
            runner.token_to_kv_pool_allocator = allocator
        runner.alloc_memory_pool(config)
    runner = worker.model_runner
    worker.max_total_num_tokens = runner.max_total_num_tokens
    worker.max_running_requests = runner.max_running_requests
    if worker.max_running_requests <= 0:
        raise RuntimeError(
            "max_running_requests resolved to 0: the KV pool is too small. "
            "Raise --mem-fraction-static or lower --max-running-requests."
        )
    worker.max_req_len = min(worker.model_config.context_len - 1, runner.max_token_pool_size - 1)
    worker.max_req_input_len = worker.max_req_len - 5
    if worker.max_req_len <= 0 or worker.max_req_input_len <= 0:
        raise RuntimeError(
            f"The KV pool ({runner.max_total_num_tokens} tokens) is too small for one request. "
            "Raise --mem-fraction-static."
        )
    worker._specinit_pools_pending = False


@patch.adds("TpModelWorker")
def init_backends(self: Any) -> None:
    for runner in runners_of(self):
        runner.init_backends()


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
