"""Price a runner's KV pool by building it with sglang 0.5.23's own pool code at tiny sizes.

sglang 0.5.23. Read (not patched): ``KVCacheConfigurator._derive_pool_sizes`` and
``KVCacheConfigurator._init_pools`` (``mem_cache.kv_cache_configurator``),
``ModelRunner.init_kv_cache_configurator`` (``model_executor.model_runner``).

0.5.23 turns a ``MemoryPoolConfig`` into pools in two steps of the runner's configurator: the
config's token counts become the pool sizes (``_derive_pool_sizes``: a draft under decode
context parallelism spans ``attn_dcp_size`` times the target's rows, since it is replicated
across the DCP ranks), then ``_init_pools`` picks the pool class (MHA, MLA, DSA with its
index-K buffer and FP8 layout, hybrid SWA, hybrid linear ...) and allocates. The probe runs
exactly these two steps at tiny token counts, for the target's configurator and for one built
for each draft runner the way its own ``alloc_memory_pool`` builds it, and reads the bytes
the KV pool owns (:mod:`sglang_specinit.pool_measure`). So every price is what 0.5.23
allocates for that layout, per target row: nothing is derived from the model's geometry.
"""

from __future__ import annotations

import contextlib
from typing import Any

from sglang_specinit.budget import MeasuredKVSpec
from sglang_specinit.pool_measure import (
    PROBE_REQUESTS,
    kv_pool_storages,
    measure_linear,
    model_name,
)

_MISSING = object()


def tiny_mamba_cache(kvc: Any) -> contextlib.AbstractContextManager[None]:
    """A hybrid model's request pool holds mamba state for ``max_mamba_cache_size``
    requests: not part of the KV price (SGLang reserves it itself while profiling), so the
    probe's request pool holds one (in the schedule ``kvc`` sizes with: release_shims)."""
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
        # No shared request pool or allocator: the probe owns every pool it builds.
        pools = kvc._init_pools(
            sizes=sizes, req_to_token_pool=None, token_to_kv_pool_allocator=None
        )
    return kv_pool_storages(
        pools.token_to_kv_pool, pools.req_to_token_pool, pools.token_to_kv_pool_allocator
    )


def target_split(kvc: Any) -> tuple[float, bool]:
    """(swa_full_tokens_ratio, whether it applies): how the target's config splits a token
    count into full and sliding-window tokens (``HybridSWAPoolConfigurator``: SWA tokens are
    ``page_floor(full * ratio)`` when the model has full-attention layers; an all-SWA model's
    count is its SWA count). Draft pools take the target's config, so they share the split."""
    from sglang_specinit.sglang_0_5_23.release_shims import full_attention_layer_ids, schedule_of

    full_layers = full_attention_layer_ids(kvc)
    applies = bool(kvc.is_hybrid_swa and full_layers)
    return float(schedule_of(kvc).swa_full_tokens_ratio), applies


def measure_configurator(kvc: Any, split: tuple[float, bool]) -> MeasuredKVSpec:
    """The KV pool ``kvc`` allocates per target row, priced by building it at tiny sizes."""
    ratio, applies = split
    return measure_linear(
        lambda full, swa: _build(kvc, full, swa),
        int(kvc.page_size),
        what=f"{model_name(kvc.model_config)} ({'draft' if kvc.is_draft_worker else 'target'})",
        swa_full_tokens_ratio=ratio,
        ratio_applies=applies,
    )


def draft_configurator(runner: Any) -> Any:
    """A configurator for a draft runner, built by its own ``init_kv_cache_configurator``
    (as its ``alloc_memory_pool`` will: draft workers pass no parallel layout), with the
    runner's attribute put back as it was."""
    return runner_configurator(runner)


def runner_configurator(runner: Any, draft_parallel_layout: Any = None) -> Any:
    """The configurator ``runner.init_kv_cache_configurator`` builds (the target passes the
    draft's parallel layout, as ``TpModelWorker.alloc_memory_pool`` will), with the runner's
    attribute put back as it was: SGLang builds its own one later."""
    from sglang_specinit.sglang_0_5_23.release_shims import init_kv_cache_configurator

    saved = runner.__dict__.get("kv_cache_configurator", _MISSING)
    try:
        init_kv_cache_configurator(runner, draft_parallel_layout)
        return runner.kv_cache_configurator
    finally:
        if saved is _MISSING:
            runner.__dict__.pop("kv_cache_configurator", None)
        else:
            runner.kv_cache_configurator = saved
