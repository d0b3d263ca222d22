"""Price a runner's KV pool by building it with 0.5.13's ``_apply_memory_pool_config`` at tiny
sizes on the live runner, put back as it was; the probe pools are freed before profiling."""

from __future__ import annotations

from typing import Any

from sglang_specinit.budget import MeasuredKVSpec
from sglang_specinit.pool_measure import measure_runner_pool, model_name

# What _apply_memory_pool_config / _init_pools set on the runner.
_RUNNER_ATTRS = (
    "max_total_num_tokens",
    "max_running_requests",
    "full_max_total_num_tokens",
    "swa_max_total_num_tokens",
    "c4_max_total_num_tokens",
    "c128_max_total_num_tokens",
    "c4_state_pool_size",
    "c128_state_pool_size",
    "state_dtype",
    "req_to_token_pool",
    "token_to_kv_pool",
    "token_to_kv_pool_allocator",
)


def measure_kv_pool(
    runner: Any, swa_full_tokens_ratio: float = 1.0, ratio_applies: bool = False
) -> MeasuredKVSpec:
    what = model_name(runner.model_config)
    return measure_runner_pool(runner, _RUNNER_ATTRS, what, (swa_full_tokens_ratio, ratio_applies))
