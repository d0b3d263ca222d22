"""Price a configurator's KV pool by building it with sglang's own ``_derive_pool_sizes`` and
``_init_pools`` at tiny token counts: every price is what the release allocates per target row,
nothing derived from the model's geometry."""

from __future__ import annotations

import contextlib
from typing import Any

from sglang_specinit.budget import MeasuredKVSpec
from sglang_specinit.pool_measure import (
    PROBE_REQUESTS,
    attributes_restored,
    kv_pool_storages,
    measure_linear,
    model_name,
)


def tiny_mamba_cache(kvc: Any) -> contextlib.AbstractContextManager[None]:
    """The probe's mamba state for one request: not part of the KV price."""
    from sglang_specinit.sglang_0_5_23.release_shims import scoped_schedule

    return scoped_schedule(kvc, max_mamba_cache_size=PROBE_REQUESTS)


def _build(kvc: Any, full_tokens: int, swa_tokens: int) -> dict[str, int]:
    from sglang.srt.model_executor.pool_configurator import MemoryPoolConfig

    config = MemoryPoolConfig(
        max_total_num_tokens=full_tokens,
        max_running_requests=PROBE_REQUESTS,
        full_max_total_num_tokens=full_tokens,
        swa_max_total_num_tokens=swa_tokens,
    )
    sizes = kvc._derive_pool_sizes(config=config)
    with tiny_mamba_cache(kvc):
        pools = kvc._init_pools(
            sizes=sizes, req_to_token_pool=None, token_to_kv_pool_allocator=None
        )
    return kv_pool_storages(
        pools.token_to_kv_pool, pools.req_to_token_pool, pools.token_to_kv_pool_allocator
    )


def target_split(kvc: Any) -> tuple[float, bool]:
    """(swa_full_tokens_ratio, whether it applies) of the target's split, shared by drafts."""
    from sglang_specinit.sglang_0_5_23.release_shims import full_attention_layer_ids, schedule_of

    full_layers = full_attention_layer_ids(kvc)
    applies = bool(kvc.is_hybrid_swa and full_layers)
    return float(schedule_of(kvc).swa_full_tokens_ratio), applies


def measure_configurator(kvc: Any, split: tuple[float, bool]) -> MeasuredKVSpec:
    """The KV pool ``kvc`` allocates per target row."""
    ratio, applies = split
    return measure_linear(
        lambda full, swa: _build(kvc, full, swa),
        int(kvc.page_size),
        what=f"{model_name(kvc.model_config)} ({'draft' if kvc.is_draft_worker else 'target'})",
        swa_full_tokens_ratio=ratio,
        ratio_applies=applies,
    )


def runner_configurator(runner: Any, draft_parallel_layout: Any = None) -> Any:
    """The configurator ``runner.init_kv_cache_configurator`` builds, the attribute put back."""
    from sglang_specinit.sglang_0_5_23.release_shims import configurator_layout_kwargs

    with attributes_restored(runner, ("kv_cache_configurator",)):
        runner.init_kv_cache_configurator(**configurator_layout_kwargs(draft_parallel_layout))
        return runner.kv_cache_configurator
