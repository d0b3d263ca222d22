"""Price a runner's KV pool by building it with sglang 0.5.14 / 0.5.15's own pool code.

Read (not patched): ``ModelRunnerKVCacheMixin._apply_memory_pool_config`` and ``_init_pools``
(``model_executor.model_runner_kv_cache_mixin``), ``MemoryPoolConfig``
(``model_executor.pool_configurator``).

In these releases the runner itself turns a ``MemoryPoolConfig`` into pools
(``_apply_memory_pool_config`` sets the token counts on the runner, ``_init_pools`` picks the
pool class and allocates), as in 0.5.13. The probe runs that method on the live target and
draft runners at a few tiny sizes, reads the bytes the KV pool owns
(:func:`sglang_specinit.pool_measure.runner_pool_storages`, shared with the 0.5.13 adapter)
and puts every attribute it set back. The probe pools are freed before free memory is
profiled.
"""

from __future__ import annotations

import gc
from typing import Any

from sglang_specinit.budget import MeasuredKVSpec
from sglang_specinit.pool_measure import (
    measure_linear,
    model_name,
    runner_pool_storages,
)

# What _apply_memory_pool_config / _init_pools set on the runner in 0.5.14 and 0.5.15
# (model_runner_kv_cache_mixin.py); 0.5.15 adds _unified_memory_pool. Restored afterwards.
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


def target_split(runner: Any) -> tuple[float, bool]:
    """(swa_full_tokens_ratio, whether it applies): how the target's configurator splits a
    token count (``HybridSWAPoolConfigurator``: SWA tokens follow the ratio when the model has
    full-attention layers). Draft pools take the target's config, so they share the split."""
    ratio = float(runner.server_args.swa_full_tokens_ratio)
    applies = bool(runner.is_hybrid_swa) and bool(runner.model_config.full_attention_layer_ids)
    return ratio, applies


def measure_runner(runner: Any, split: tuple[float, bool]) -> MeasuredKVSpec:
    """The KV pool ``runner`` allocates per target row, priced by building it at tiny sizes."""
    ratio, applies = split
    role = "draft" if runner.is_draft_worker else "target"
    price = measure_linear(
        lambda full, swa: runner_pool_storages(runner, full, swa, RUNNER_ATTRS),
        int(runner.page_size),
        what=f"{model_name(runner.model_config)} ({role})",
        swa_full_tokens_ratio=ratio,
        ratio_applies=applies,
    )
    # The probe pools must be gone before SGLang reads free memory.
    gc.collect()
    return price
