"""TpModelWorker in phases (0.5.13 / 0.5.13.post1): the constructor asserts on pool sizes the
runner does not have yet, so stand-ins live for the constructor only; ``alloc_memory_pool`` sets
the real values and re-checks them.
"""

from __future__ import annotations

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


@patch.adds("TpModelWorker")
def alloc_memory_pool(
    self: Any,
    memory_pool_config: Any = None,
    req_to_token_pool: Any = None,
    token_to_kv_pool_allocator: Any = None,
) -> None:
    if req_to_token_pool is not None:
        self.req_to_token_pool = req_to_token_pool
    if token_to_kv_pool_allocator is not None:
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
    if memory_pool_config is not None:
        self.memory_pool_config = memory_pool_config
    for runner in runners_of(self):
        if req_to_token_pool is not None:
            runner.req_to_token_pool = req_to_token_pool
        if token_to_kv_pool_allocator is not None:
            runner.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        runner.alloc_memory_pool(memory_pool_config)
    _set_pool_derived_sizes(self)
    self._specinit_pools_pending = False


def _set_pool_derived_sizes(worker: Any) -> None:
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


@patch.adds("TpModelWorker")
def init_backends(self: Any) -> None:
    for runner in runners_of(self):
        runner.init_backends()


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
