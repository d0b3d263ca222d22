"""DeepSeek-V4 + MTP (0.5.21 - 0.5.23): SGLang's own V4 solve with the draft's real term.

Stock inflates both per-token coefficients by (T + 1) / T for the NextN draft; here that term is
the draft pools' measured bytes, checked against the pools SGLang builds (on device ``meta``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sglang_specinit.budget import MeasuredKVSpec
from sglang_specinit.pool_measure import kv_pool_storages, pool_logs_quiet


def is_dsv4_configurator(configurator: Any) -> bool:
    from sglang.srt.model_executor.pool_configurator import DSV4PoolConfigurator

    return type(configurator) is DSV4PoolConfigurator


def unpriced_reason(configurator: Any) -> str | None:
    """Why this V4 launch's draft is not a paged NextN pool priced here, or None."""
    try:
        if configurator._unified:
            return "DeepSeek-V4 unified KV rings (request-scoped draft ring)"
        if configurator.encoder_replay:
            return "DeepSeek-V4 encoder SWA bounded replay (request-window draft budget)"
        if getattr(configurator, "_dspark_draft_on_bf16", False) or configurator.paged_draft_layers:
            return "a DSpark draft (its own ring and layer count)"
    except AttributeError as exc:  # an older configurator: the server keeps stock's sizing too
        return f"a layout sglang-specinit cannot read ({type(exc).__name__}: {exc})"
    return None


def runner_unpriced_reason(runner: Any) -> str | None:
    """:func:`unpriced_reason` for a target runner before its pools exist; None if not V4."""
    from sglang.srt.configs.model_config import is_deepseek_v4
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    from sglang_specinit.sglang_0_5_23.pool_probe import runner_configurator

    if not is_deepseek_v4(runner.model_config.hf_config):
        return None
    configurator = create_memory_pool_configurator(runner_configurator(runner))
    return unpriced_reason(configurator) if is_dsv4_configurator(configurator) else None


def priced_configurator(target: Any, draft_prices: Sequence[MeasuredKVSpec]) -> Any:
    """SGLang's configurator for ``target`` with the draft term replaced by ``draft_prices``."""
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    configurator = create_memory_pool_configurator(target)
    configurator._spec_infl = 1.0
    configurator.bytes_per_swa_token = configurator._get_bytes_per_swa_token() + sum(
        d.swa_bytes_per_token for d in draft_prices
    )
    configurator.bytes_per_full_token = configurator._get_bytes_per_full_token() + sum(
        d.full_bytes_per_token for d in draft_prices
    )
    return configurator


def draft_padding_bytes(draft_prices: Sequence[MeasuredKVSpec]) -> int:
    return sum(d.fixed_bytes for d in draft_prices)


def stock_draft_bytes_per_row(target: Any) -> float:
    """Stock's draft reserve per full target token: its inflation of the coefficient."""
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    configurator = create_memory_pool_configurator(target)
    return configurator.bytes_per_full_token - plain_coefficient(configurator)


def draft_bytes_per_row(configurator: Any, draft_prices: Sequence[MeasuredKVSpec]) -> float:
    """The draft pools' bytes per full target token (cap mode: no SWA share)."""
    swa = sum(d.swa_bytes_per_token for d in draft_prices)
    full = sum(d.full_bytes_per_token for d in draft_prices)
    if configurator.swa_cap_tokens is None:
        return full + configurator.swa_ratio * swa
    return float(full)


def solve(kvc: Any, configurator: Any, available_bytes: int, padding_bytes: int) -> Any:
    """SGLang's ``config_from_budget`` steps on ``configurator``, the draft padding off first."""
    from sglang_specinit.sglang_0_5_23.release_shims import schedule_of

    page = int(schedule_of(kvc).page_size)
    with pool_logs_quiet():
        config = configurator.calculate_pool_sizes(max(available_bytes - padding_bytes, 0), page)
        tokens = kvc._apply_token_constraints(config.max_total_num_tokens)
        if tokens != config.max_total_num_tokens:
            config = configurator.calculate_pool_sizes_from_max_tokens(tokens, page)
    return finalized(kvc, configurator, config)


def finalized(kvc: Any, configurator: Any, config: Any) -> Any:
    """``config`` with SGLang's request count, finalization and the schedule's fraction."""
    from sglang_specinit.sglang_0_5_23.release_shims import schedule_of

    config.max_running_requests = kvc.resolve_max_num_reqs(config.max_total_num_tokens)
    config = configurator.finalize_with_max_running_requests(config)
    config.mem_fraction_static = schedule_of(kvc).mem_fraction_static
    return config


def built_pool_bytes(kvc: Any, config: Any) -> int:
    """Bytes of the pools ``kvc`` builds from ``config``, built on ``meta`` (nothing allocated)."""
    from sglang.srt.mem_cache import memory_pool

    saved_device = kvc.device
    saved_copy = memory_pool.copy_all_layer_kv_cache_func
    kvc.device = "meta"
    # The pool's warm-up self-copy has no meta kernel.
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


def built_pools(kvc: Any, drafts: Sequence[Any], config: Any) -> tuple[int, int]:
    """(target, draft) bytes of the pools built from ``config``."""
    return built_pool_bytes(kvc, config), sum(built_pool_bytes(d, config) for d in drafts)


def fitted(
    kvc: Any, configurator: Any, config: Any, available_bytes: int, drafts: Sequence[Any]
) -> Any:
    """``config`` stepped down by whole pages until the built pools fit ``available_bytes``:
    SGLang's V4 coefficients leave a few MB of rounding out, which stock's reserve hides."""
    from sglang_specinit.sglang_0_5_23.release_shims import schedule_of

    page = int(schedule_of(kvc).page_size)
    while True:
        over = sum(built_pools(kvc, drafts, config)) - available_bytes
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
        config = finalized(kvc, configurator, smaller)


def target_display_spec(configurator: Any) -> MeasuredKVSpec:
    """The target's per-token price the report prints: SGLang's coefficient, no draft term."""
    import math

    plain = plain_coefficient(configurator)
    return MeasuredKVSpec(full_bytes_per_token=math.ceil(plain))


def plain_coefficient(configurator: Any) -> float:
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
    """The ``PoolPlan`` of a V4 config, with the pools as built."""
    from sglang_specinit.budget import PoolPlan, draft_weight_bytes_of, static_budget_bytes

    target_pool, draft_pool = pool_bytes
    return PoolPlan(
        rule=rule,
        tokens=int(config.max_total_num_tokens),
        max_running_requests=int(config.max_running_requests),
        page_size=inputs.page_size,
        budget_bytes=static_budget_bytes(inputs),
        resident_bytes=resident_weights(inputs),
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


def resident_weights(inputs: Any) -> int:
    """The weights resident at sizing: measured, else both models' weights."""
    from sglang_specinit.budget import draft_weight_bytes_of

    if inputs.measured_resident_bytes is not None:
        return inputs.measured_resident_bytes
    return inputs.target_weight_bytes + draft_weight_bytes_of(inputs)
