"""Wraps ``KVCacheConfigurator._resolve_memory_pool_config``: SGLang's sizing steps stay, its
cell (the draft at the target's geometry) is replaced by ``budget.plan_pools`` on pools built tiny
(:mod:`.pool_probe`). Acts only while :mod:`.scheduler` has a sizing active."""

from __future__ import annotations

import logging
import time
from typing import Any

from sglang_specinit.budget import make_plan, tokens_within_pool_budget
from sglang_specinit.compat import installed_sglang_version
from sglang_specinit.live_sizing import (
    SizingReadings,
    SpecInitBudgetError,
    budget_error_message,
    plan_from_readings,
)
from sglang_specinit.patch_table import PatchTable
from sglang_specinit.phased.sizing_state import Prices, TargetSizing, active_sizing, priced_readings
from sglang_specinit.sglang_0_5_23 import dsv4_sizing, pool_probe
from sglang_specinit.sglang_0_5_23.release_shims import (
    attn_dp_size,
    fused_entry_bytes,
    schedule_of,
)

logger = logging.getLogger(__name__)

MODULE = "sglang.srt.mem_cache.kv_cache_configurator"

POOL_CONFIGURATOR = "sglang.srt.model_executor.pool_configurator"
MODEL_RUNNER = "sglang.srt.model_executor.model_runner"

patch = PatchTable(MODULE)


# Every target pool sized here, for the post-capture resize.
_SIZED: dict[int, tuple[Any, Prices]] = {}
# The post-capture budget's tokens at real prices, while SGLang's config_from_budget runs.
_PRE_SYNC_CAP: dict[int, int] = {}


@patch.around("KVCacheConfigurator._resolve_memory_pool_config", params=("pre_model_load_memory",))
@patch.calls(
    "create_memory_pool_configurator",
    "DefaultPoolConfigurator.calculate_pool_sizes_from_max_tokens",
    "HybridSWAPoolConfigurator.calculate_pool_sizes_from_max_tokens",
    "MemoryPoolConfigurator.finalize_with_max_running_requests",
    "MemoryPoolConfig",
    module=POOL_CONFIGURATOR,
)
@patch.calls("ModelRunner.init_kv_cache_configurator", module=MODEL_RUNNER)
@patch.calls(
    "KVCacheConfigurator._profile_available_bytes",
    "KVCacheConfigurator.resolve_max_num_reqs",
    "KVCacheConfigurator._derive_pool_sizes",
    "KVCacheConfigurator._init_pools",
)
def resolve_memory_pool_config(original: Any, self: Any, pre_model_load_memory: float) -> Any:
    """AROUND hook: a speculative target's token count from ``budget.plan_pools``."""
    sizing = active_sizing()
    if sizing is None or self.is_draft_worker or sizing.plan is not None:
        return original(self, pre_model_load_memory)
    from sglang.srt.model_executor.pool_configurator import (
        DefaultPoolConfigurator,
        HybridSWAPoolConfigurator,
        create_memory_pool_configurator,
    )

    configurator = create_memory_pool_configurator(self)
    if dsv4_sizing.is_dsv4_configurator(configurator):
        return _resolve_dsv4(original, self, configurator, sizing, pre_model_load_memory)
    fused = any(fused_entry_bytes(self, pool) is not None for pool in ("full", "swa"))
    if fused or type(configurator) not in (DefaultPoolConfigurator, HybridSWAPoolConfigurator):
        reason = "a fused draft pool" if fused else f"{type(configurator).__name__} pools"
        why = " (draft priced at the target's geometry): %s are not priced by sglang-specinit%s"
        clause = bind_early(sizing, priced=False)
        return stock_sizing(original, self, pre_model_load_memory, why, reason, clause)
    try:
        # Priced before free memory is profiled: the probe pools are gone by then.
        start = time.perf_counter()
        prices = price_pools(self, sizing)
        sizing.pricing_seconds = time.perf_counter() - start
    except Exception as exc:  # any pool 0.5.23 cannot build tiny is not ours to size
        why = (
            " (draft priced at the target's geometry): the pools of this launch could not be "
            "priced by building them (%s: %s)%s"
        )
        args = (type(exc).__name__, exc, bind_early(sizing, priced=False))
        return stock_sizing(original, self, pre_model_load_memory, why, *args)
    bind_early(sizing, priced=True)
    return _resolve(self, configurator, sizing, pre_model_load_memory, prices)


def stock_sizing(original: Any, kvc: Any, pre_load: float, why: str, *args: Any) -> Any:
    """One WARNING (``why`` % ``args``) and SGLang's own sizing."""
    logger.warning("[specinit] stock sglang %s KV sizing" + why, installed_sglang_version(), *args)
    return original(kvc, pre_load)


def bind_early(sizing: TargetSizing, *, priced: bool) -> str:
    """Run the sizing's early binding once; returns "; " + its log clause, or ""."""
    binder, sizing.bind_early = sizing.bind_early, None
    if binder is None:
        return ""
    note = binder(priced)
    return f"; {note}" if note else ""


def price_configurators(
    target: Any, pool_drafts: list[Any], fixed_drafts: list[tuple[Any, int]]
) -> Prices:
    """(target pool, draft pools, fixed-size draft pool bytes), each built tiny and measured."""
    split = pool_probe.target_split(target)
    return (
        pool_probe.measure_configurator(target, split),
        tuple(pool_probe.measure_configurator(kvc, split) for kvc in pool_drafts),
        sum(
            pool_probe.measure_configurator(kvc, split).pool_bytes(tokens, int(kvc.page_size))
            for kvc, tokens in fixed_drafts
        ),
    )


def price_pools(kvc: Any, sizing: TargetSizing) -> Prices:
    """:func:`price_configurators` on the target's and each draft runner's configurator."""
    described = sizing.draft
    return price_configurators(
        kvc,
        [pool_probe.runner_configurator(r) for r in described.pool_runners],
        [(pool_probe.runner_configurator(r), tokens) for r, tokens in described.fixed_pools],
    )


def read_sizing(
    kvc: Any,
    sizing: TargetSizing,
    pre_model_load_memory: float,
    available_bytes: int,
    prices: Prices,
) -> SizingReadings:
    """What the shared sizing path needs, read from the live target configurator."""
    schedule = schedule_of(kvc)
    return priced_readings(
        sizing,
        prices,
        kvc.model,
        reserved_draft_layers=kvc.spec_aux_config.eagle_draft_num_layers,
        pre_model_load_memory=pre_model_load_memory,
        available_bytes=available_bytes,
        mem_fraction_static=schedule.mem_fraction_static,
        page_size=schedule.page_size,
        context_len=kvc.model_config.context_len,
        max_total_tokens=schedule.max_total_tokens,
        max_running_requests=schedule.max_running_requests,
        dp_size=attn_dp_size(kvc),
    )


def _resolve(
    kvc: Any,
    configurator: Any,
    sizing: TargetSizing,
    pre_model_load_memory: float,
    prices: Prices,
) -> Any:
    available_bytes = kvc._profile_available_bytes(pre_model_load_memory)
    readings = read_sizing(kvc, sizing, pre_model_load_memory, available_bytes, prices)
    inputs, plan = plan_from_readings(readings)
    # Every rank reaches SGLang's PP MIN all-reduce once, priced or stock, so collectives match.
    tokens = kvc._apply_token_constraints(plan.tokens)
    if tokens != plan.tokens:
        sizing.stage_tokens = plan.tokens
        plan = make_plan(
            plan.rule,
            inputs,
            tokens,
            plan.resident_bytes,
            plan.priced_bytes_per_token,
            plan.min_viable_mem_fraction_static,
            plan.notes,
        )
    sizing.inputs, sizing.plan = inputs, plan
    _SIZED[id(kvc)] = (kvc, prices)
    config = configurator.calculate_pool_sizes_from_max_tokens(tokens, inputs.page_size)
    return dsv4_sizing.finalized(kvc, configurator, config)


def _resolve_dsv4(
    original: Any, kvc: Any, configurator: Any, sizing: TargetSizing, pre_model_load_memory: float
) -> Any:
    """A DeepSeek-V4 target: SGLang's own V4 solve with the draft's real term."""

    reason = dsv4_sizing.unpriced_reason(configurator)
    if reason is None and (sizing.draft.fixed_pools or not sizing.draft.pool_runners):
        reason = "a DeepSeek-V4 draft without a token-sized pool"
    if reason is not None:
        why = " (draft reserved as (T + 1) / T target layers): %s is not priced by "
        why += "sglang-specinit%s"
        clause = bind_early(sizing, priced=False)
        return stock_sizing(original, kvc, pre_model_load_memory, why, reason, clause)
    try:
        start = time.perf_counter()
        drafts = [pool_probe.runner_configurator(r) for r in sizing.draft.pool_runners]
        split = pool_probe.target_split(kvc)
        draft_prices = tuple(pool_probe.measure_configurator(d, split) for d in drafts)
        priced = dsv4_sizing.priced_configurator(kvc, draft_prices)
        sizing.pricing_seconds = time.perf_counter() - start
    except Exception as exc:  # a pool 0.5.23 cannot build tiny is not ours to size
        why = ": the DeepSeek-V4 draft pool could not be priced by building it (%s: %s)%s"
        args = (type(exc).__name__, exc, bind_early(sizing, priced=False))
        return stock_sizing(original, kvc, pre_model_load_memory, why, *args)
    # Safe before the solve: stock's (T + 1) / T fallback holds more than the NextN draft.
    bind_early(sizing, priced=True)
    try:
        return _solve_dsv4(kvc, sizing, pre_model_load_memory, priced, draft_prices, drafts)
    except SpecInitBudgetError:
        raise  # a launch that cannot fit one page stops, as every priced launch does
    except Exception as exc:
        # Untested on a real V4 launch: an unexpected layout keeps stock rather than failing.
        sizing.inputs = sizing.plan = None
        why = ": the DeepSeek-V4 solve with the draft's measured term failed (%s: %s)"
        return stock_sizing(original, kvc, pre_model_load_memory, why, type(exc).__name__, exc)


def _solve_dsv4(
    kvc: Any,
    sizing: TargetSizing,
    pre_model_load_memory: float,
    priced: Any,
    draft_prices: tuple[Any, ...],
    drafts: list[Any],
) -> Any:
    """SGLang's V4 solve on the priced configurator, fitted to the pools it builds."""
    available = kvc._profile_available_bytes(pre_model_load_memory)
    padding = dsv4_sizing.draft_padding_bytes(draft_prices)
    config = dsv4_sizing.solve(kvc, priced, available, padding)
    config = dsv4_sizing.fitted(kvc, priced, config, available, drafts)
    target_spec = dsv4_sizing.target_display_spec(priced)
    readings = read_sizing(
        kvc, sizing, pre_model_load_memory, available, (target_spec, draft_prices, 0)
    )
    inputs, _ = plan_from_readings(readings, refuse_too_few=False)
    built = dsv4_sizing.built_pools(kvc, drafts, config)
    at_profile = int(schedule_of(kvc).mem_fraction_static * inputs.pre_load_free_bytes) - available
    over = sum(built) > available  # fitted stepped down to one page and it still does not fit
    plan = dsv4_sizing.plan_of(
        "specinit",
        inputs,
        config,
        built,
        dsv4_sizing.draft_bytes_per_row(priced, draft_prices),
        float(priced.bytes_per_full_token),
        at_profile + (sum(built) if over else 0),
    )
    if over:
        raise SpecInitBudgetError(budget_error_message(inputs, plan))
    sizing.inputs, sizing.plan = inputs, plan
    return config


@patch.around("KVCacheConfigurator.config_from_budget", params=("budget_bytes",))
def config_from_budget(
    original: Any, self: Any, budget_bytes: int, *, cap_tokens: int | None = None
) -> Any:
    """AROUND hook: the post-capture resize never sizes past this package's prices."""
    entry = _SIZED.get(id(self))
    if cap_tokens is None or entry is None or entry[0] is not self:
        return original(self, budget_bytes, cap_tokens=cap_tokens)
    target_kv, draft_pools, _fixed = entry[1]
    ours = tokens_within_pool_budget((target_kv, *draft_pools), budget_bytes, int(self.page_size))
    _PRE_SYNC_CAP[id(self)] = ours
    try:
        return original(self, budget_bytes, cap_tokens=cap_tokens)
    finally:
        _PRE_SYNC_CAP.pop(id(self), None)


@patch.around("KVCacheConfigurator._apply_token_constraints", params=("token_capacity",))
def apply_token_constraints(original: Any, self: Any, token_capacity: int) -> int:
    """AROUND hook: in a post-capture resize, the count entering SGLang's PP sync is capped at
    what the budget buys at real prices, so every stage gets one count."""
    cap = _PRE_SYNC_CAP.get(id(self))
    if cap is not None:
        token_capacity = min(token_capacity, cap)
    return original(self, token_capacity)


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
