"""Price a runner's KV pool by building it with 0.5.14 / 0.5.15's own pool code: as in 0.5.13 the
runner turns a ``MemoryPoolConfig`` into pools; the probe runs that on the live runners at tiny
sizes and puts back every attribute it set."""

from __future__ import annotations

from typing import Any

from sglang_specinit.budget import MeasuredKVSpec
from sglang_specinit.pool_measure import measure_runner_pool, model_name

# What _apply_memory_pool_config / _init_pools set on the runner (0.5.15 adds the last).
RUNNER_ATTRS = (
    "max_total_num_tokens",
    "max_running_requests",
    "full_max_total_num_tokens",
    "swa_max_total_num_tokens",
    "c4_max_total_num_tokens",
    "c128_max_total_num_tokens",
    "c4_state_pool_size",
    "c128_state_pool_size",
    "c4_state_dtype",
    "c128_state_dtype",
    "req_to_token_pool",
    "token_to_kv_pool",
    "token_to_kv_pool_allocator",
    "_unified_memory_pool",
)


def measure_runner(runner: Any, split: tuple[float, bool]) -> MeasuredKVSpec:
    role = "draft" if runner.is_draft_worker else "target"
    return measure_runner_pool(
        runner, RUNNER_ATTRS, f"{model_name(runner.model_config)} ({role})", split
    )
