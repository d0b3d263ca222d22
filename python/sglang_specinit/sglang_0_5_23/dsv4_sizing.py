"""DeepSeek-V4 + MTP on sglang 0.5.20 - 0.5.23: stock's own solve, with the draft's real term.

Read (not patched): ``model_executor.pool_configurator`` (``create_memory_pool_configurator``,
``DSV4PoolConfigurator``: ``_get_bytes_per_swa_token``, ``_get_bytes_per_full_token``,
``calculate_pool_sizes``, ``calculate_pool_sizes_from_max_tokens``,
``finalize_with_max_running_requests``), ``KVCacheConfigurator`` (``_apply_token_constraints``,
``resolve_max_num_reqs``, ``_derive_pool_sizes``, ``_init_pools``).

0.5.23 sizes a DeepSeek-V4 launch with its ``DSV4PoolConfigurator``: a coefficient per full
token (compressed c4/c128 KV, indexer, and the SWA pool at ``swa_full_tokens_ratio`` in ratio
mode), fixed bytes for the request-scoped state pools (c128 / ratio-2 state, the SWA pool in
cap mode) and its own page-padding loop. It reserves the MTP draft by multiplying both
per-token coefficients by ``(T + 1) / T``, as if the draft were one more *target* layer. The
NextN draft (``models/deepseek_v4_nextn.py``) has one SWA-only layer
(``COMPRESS_RATIO_NEXTN_LAYER``); ``_derive_pool_sizes`` zeroes its c4/c128/state pools. So
on V4-Flash (43 layers) stock reserves 1/43 of the target's compressed and state bytes the
draft never allocates.

:func:`priced_configurator` keeps everything of SGLang's solve and changes only that term:
the configurator SGLang builds for the target, its two coefficients recomputed by its own
methods without the inflation, plus the draft's bytes per SWA slot and per full token as the
draft's pools allocate them (measured by building them, :mod:`.pool_probe`); the draft pool's
padding comes off the budget before the solve. Ratio and cap modes both follow: in ratio mode
the SWA slot price enters the per-token coefficient at SGLang's ratio, in cap mode SGLang's
fixed SWA bytes. :func:`built_pool_bytes` reads what a pool built from a config owns, built on
device ``meta`` (sizes without memory), for the plan and the layout tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sglang_specinit.budget import MeasuredKVSpec
from sglang_specinit.pool_measure import kv_pool_storages, pool_logs_quiet


def is_dsv4_configurator(configurator: Any) -> bool:
    """Whether SGLang chose its DeepSeek-V4 compressed-attention configurator."""
    from sglang.srt.model_executor.pool_configurator import DSV4PoolConfigurator

    return type(configurator) is DSV4PoolConfigurator


def unpriced_reason(configurator: Any) -> str | None:
    """Why this V4 launch's draft is not a paged NextN pool this module prices, or None.

    The unified-KV rings (``SGLANG_DSV4_UNIFIED_KV*``) and encoder SWA replay reserve the draft
    in request-scoped rings, and a DSpark draft has several layers of its own: none of them is
    the (T + 1) / T term over paged pools that :func:`priced_configurator` replaces.
    """
    if configurator._unified:
        return "DeepSeek-V4 unified KV rings (request-scoped draft ring)"
    if configurator.encoder_replay:
        return "DeepSeek-V4 encoder SWA bounded replay (request-window draft budget)"
    if getattr(configurator, "_dspark_draft_on_bf16", False) or configurator.paged_draft_layers:
        return "a DSpark draft (its own ring and layer count)"
    return None


def runner_unpriced_reason(runner: Any) -> str | None:
    """:func:`unpriced_reason` for the target ``runner``'s launch, before its pools exist (the
    scheduler's launch policy): its configurator built by its own ``init_kv_cache_configurator``
    (:func:`.pool_probe.draft_configurator`, attribute put back); None when not DeepSeek-V4."""
    from sglang.srt.configs.model_config import is_deepseek_v4
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    from sglang_specinit.sglang_0_5_23.pool_probe import draft_configurator

    if not is_deepseek_v4(runner.model_config.hf_config):
        return None
    configurator = create_memory_pool_configurator(draft_configurator(runner))
    return unpriced_reason(configurator) if is_dsv4_configurator(configurator) else None


def priced_configurator(target: Any, draft_prices: Sequence[MeasuredKVSpec]) -> Any:
    """SGLang's configurator for ``target`` with the draft term replaced by ``draft_prices``
    (each draft pool per full token and per SWA slot, built at tiny sizes)."""
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    configurator = create_memory_pool_configurator(target)
    # Both coefficients from SGLang's own methods, without (T + 1) / T ...
    configurator._spec_infl = 1.0
    # ... and the draft's pools as they allocate: one SWA slot per target SWA slot (the draft
    # applies the target's config), plus whatever scales with full tokens (none for NextN).
    configurator.bytes_per_swa_token = configurator._get_bytes_per_swa_token() + sum(
        d.swa_bytes_per_token for d in draft_prices
    )
    configurator.bytes_per_full_token = configurator._get_bytes_per_full_token() + sum(
        d.full_bytes_per_token for d in draft_prices
    )
    return configurator


def draft_padding_bytes(draft_prices: Sequence[MeasuredKVSpec]) -> int:
    """What the draft pools cost whatever the token count (their padding pages)."""
    return sum(d.fixed_bytes for d in draft_prices)


def stock_draft_bytes_per_row(target: Any) -> float:
    """What stock reserves for the draft per full target token: its inflation of the
    per-token coefficient (ratio mode; cap mode moves the SWA part to fixed bytes)."""
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    configurator = create_memory_pool_configurator(target)
    inflated = configurator.bytes_per_full_token
    configurator._spec_infl = 1.0
    configurator.bytes_per_swa_token = configurator._get_bytes_per_swa_token()
    return inflated - configurator._get_bytes_per_full_token()


def draft_bytes_per_row(configurator: Any, draft_prices: Sequence[MeasuredKVSpec]) -> float:
    """What the draft pools allocate per full target token under ``configurator``'s split
    (ratio mode: ``ratio`` SWA slots per full token; cap mode: none, its SWA pool is fixed)."""
    swa = sum(d.swa_bytes_per_token for d in draft_prices)
    full = sum(d.full_bytes_per_token for d in draft_prices)
    if configurator.swa_cap_tokens is None:
        return full + configurator.swa_ratio * swa
    return float(full)


def solve(kvc: Any, configurator: Any, available_bytes: int, padding_bytes: int) -> Any:
    """The ``MemoryPoolConfig`` 0.5.23's ``_resolve_memory_pool_config`` derives from
    ``available_bytes`` (its ``config_from_budget`` steps: ``calculate_pool_sizes``, the user
    cap and PP sync, ``resolve_max_num_reqs``, ``finalize_with_max_running_requests``), on
    ``configurator``, with ``padding_bytes`` of draft padding taken off first."""
    from sglang_specinit.sglang_0_5_23.release_shims import schedule_of

    page = int(schedule_of(kvc).page_size)
    with pool_logs_quiet():
        config = configurator.calculate_pool_sizes(max(available_bytes - padding_bytes, 0), page)
        tokens = kvc._apply_token_constraints(config.max_total_num_tokens)
        if tokens != config.max_total_num_tokens:
            config = configurator.calculate_pool_sizes_from_max_tokens(tokens, page)
    config.max_running_requests = kvc.resolve_max_num_reqs(config.max_total_num_tokens)
    config = configurator.finalize_with_max_running_requests(config)
    config.mem_fraction_static = schedule_of(kvc).mem_fraction_static
    return config


def built_pool_bytes(kvc: Any, config: Any) -> int:
    """Bytes of every storage the KV pool owns when ``kvc`` builds its pools from ``config``
    with SGLang's ``_derive_pool_sizes`` and ``_init_pools``, built on device ``meta``: the
    pool classes' own sizes at full scale, without allocating them."""
    from sglang.srt.mem_cache import memory_pool

    saved_device = kvc.device
    saved_copy = memory_pool.copy_all_layer_kv_cache_func
    kvc.device = "meta"
    # The one kernel a pool runs while it is built (a warm-up self-copy) has no meta kernel.
    memory_pool.copy_all_layer_kv_cache_func = lambda *args, **kwargs: None
    try:
        with pool_logs_quiet():
            pools = kvc._init_pools(
                sizes=kvc._derive_pool_sizes(config=config),
                req_to_token_pool=None,
                token_to_kv_pool_allocator=None,
            )
        storages = kv_pool_storages(
            pools.token_to_kv_pool, pools.req_to_token_pool, pools.token_to_kv_pool_allocator
        )
    finally:
        kvc.device = saved_device
        memory_pool.copy_all_layer_kv_cache_func = saved_copy
    return sum(storages.values())


def fitted(
    kvc: Any, configurator: Any, config: Any, available_bytes: int, drafts: Sequence[Any]
) -> Any:
    """``config``, stepped down by whole pages until the pools SGLang builds from it (target and
    ``drafts``, :func:`built_pool_bytes`) fit ``available_bytes``.

    SGLang's V4 coefficient model leaves a few MB of the target's own pools out (page and
    indexer rounding: 16-19 MB on V4-Flash at TP 4); stock's over-reserved draft hides it, a
    draft priced exactly would not, so the solve's answer is checked against the built pools.
    It stops at one page, or at the smallest pool SGLang accepts (its ``ValueError`` for a
    smaller one); a config that does not fit there is the caller's to refuse.
    """
    from sglang_specinit.sglang_0_5_23.release_shims import schedule_of

    page = int(schedule_of(kvc).page_size)
    while True:
        built = built_pool_bytes(kvc, config) + sum(built_pool_bytes(d, config) for d in drafts)
        over = built - available_bytes
        tokens = int(config.max_total_num_tokens)
        if over <= 0 or tokens <= page:
            return config
        pages = max(1, -(-int(over) // int(configurator.bytes_per_full_token * page)))
        try:
            with pool_logs_quiet():
                smaller = configurator.calculate_pool_sizes_from_max_tokens(
                    max(tokens - pages * page, page), page
                )
        except ValueError:  # SGLang refuses a pool that small (its SWA admission floor)
            return config
        config = smaller
        config.max_running_requests = kvc.resolve_max_num_reqs(config.max_total_num_tokens)
        config = configurator.finalize_with_max_running_requests(config)
        config.mem_fraction_static = schedule_of(kvc).mem_fraction_static


def target_display_spec(configurator: Any) -> MeasuredKVSpec:
    """The target's price per full token as SGLang's V4 coefficient states it, without the
    draft term: what the memory report prints per token (the plan's pool bytes are the built
    pools', :func:`built_pool_bytes`)."""
    import math

    plain = plain_coefficient(configurator)
    return MeasuredKVSpec(full_bytes_per_token=math.ceil(plain))


def plain_coefficient(configurator: Any) -> float:
    """``configurator``'s per-full-token coefficient without any draft term."""
    swa, full, infl = (
        configurator.bytes_per_swa_token,
        configurator.bytes_per_full_token,
        configurator._spec_infl,
    )
    try:
        configurator._spec_infl = 1.0
        configurator.bytes_per_swa_token = configurator._get_bytes_per_swa_token()
        return float(configurator._get_bytes_per_full_token())
    finally:
        configurator.bytes_per_swa_token = swa
        configurator.bytes_per_full_token = full
        configurator._spec_infl = infl


def plan_of(
    rule: str,
    inputs: Any,
    config: Any,
    pool_bytes: tuple[int, int],
    draft_per_row: float,
    priced_per_row: float,
    at_profile: int,
    notes: tuple[str, ...] = (),
) -> Any:
    """The :class:`~sglang_specinit.budget.PoolPlan` of a V4 config: its tokens and requests,
    the target's and the draft's pools as built (``pool_bytes``), ``at_profile`` the bytes
    resident when the pool was profiled."""
    from sglang_specinit.budget import PoolPlan, draft_weight_bytes_of, static_budget_bytes

    target_pool, draft_pool = pool_bytes
    resident = (
        inputs.measured_resident_bytes
        if inputs.measured_resident_bytes is not None
        else inputs.target_weight_bytes + draft_weight_bytes_of(inputs)
    )
    return PoolPlan(
        rule=rule,
        tokens=int(config.max_total_num_tokens),
        max_running_requests=int(config.max_running_requests),
        page_size=inputs.page_size,
        budget_bytes=static_budget_bytes(inputs),
        resident_bytes=resident,
        target_weight_bytes=inputs.target_weight_bytes,
        draft_weight_bytes=draft_weight_bytes_of(inputs),
        target_kv_bytes_per_token=inputs.target_kv.bytes_per_token(),
        draft_kv_bytes_per_token=draft_per_row,
        priced_bytes_per_token=priced_per_row,
        target_kv_pool_bytes=target_pool,
        draft_kv_pool_bytes=draft_pool,
        draft_request_bytes=0,
        min_viable_mem_fraction_static=at_profile / inputs.pre_load_free_bytes,
        notes=notes,
    )
