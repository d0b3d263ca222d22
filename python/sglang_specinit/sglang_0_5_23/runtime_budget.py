"""Size a speculative target's KV pool with the draft priced exactly (sglang 0.5.23).

Wraps ``KVCacheConfigurator._resolve_memory_pool_config`` (``mem_cache.kv_cache_configurator``).

0.5.23 turns the profiled budget into tokens with ``configurator._cell_size``, which adds
``int(cell * d / n)`` for the draft: ``d`` layers of the *target's* geometry. This hook keeps
every other step of SGLang's own sizing and swaps only that division: the free-memory reading
and its checks (``_profile_available_bytes``: slack, multimodal and mamba reservations, the
"weights leave no memory" error), the user cap and PP sync (``_apply_token_constraints``),
the pool split (``calculate_pool_sizes_from_max_tokens``) and ``resolve_max_num_reqs``. The
token count comes from ``budget.plan_pools``, the function the offline planner runs, with
every pool priced by building it with 0.5.23's own pool code at tiny sizes (:mod:`.pool_probe`:
the target's pool, each draft runner's at its own geometry and dtype, replicated across DCP
ranks where 0.5.23 replicates it, the frozen-KV stand-in), each pool's padding page and the
draft's per-request buffers counted. A pool that cannot be priced so keeps stock sizing, with
one WARNING. The hook acts only while the scheduler hook
(:mod:`.scheduler`) has a sizing active for this process's target; otherwise it is stock.
"""

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


# id(target configurator) -> (that configurator, its prices), for every target pool this
# package sized in this process; the post-capture resize reads it.
_SIZED: dict[int, tuple[Any, Prices]] = {}
# id(target configurator) -> the tokens its post-capture budget buys at real prices, while
# SGLang's config_from_budget runs for it: the token sync reads it (apply_token_constraints).
_PRE_SYNC_CAP: dict[int, int] = {}


@patch.around("KVCacheConfigurator._resolve_memory_pool_config", params=("pre_model_load_memory",))
# What this hook and the steps it drives call (read, not patched): the configurator's own
# sizing steps (_resolve), its fused-entry check (here), the probe's pool building
# (pool_probe, through price_pools) and the pool split (here and _resolve).
@patch.calls(
    "create_memory_pool_configurator",
    "DefaultPoolConfigurator.calculate_pool_sizes_from_max_tokens",
    "HybridSWAPoolConfigurator.calculate_pool_sizes_from_max_tokens",
    "MemoryPoolConfigurator.finalize_with_max_running_requests",
    "MemoryPoolConfig",
    module=POOL_CONFIGURATOR,
)
@patch.calls("ModelRunner.init_kv_cache_configurator", module=MODEL_RUNNER)
# The schedule the sizing reads (here, _resolve) and the probe overrides (pool_probe) is
# release_shims.schedule_of: runtime_context.get_schedule from 0.5.17, the configurator's own
# server_args on 0.5.16; each a release_requires row, so a release without it is refused by the
# guard, not by an ImportError mid-sizing.
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
    # Fused draft entries exist from 0.5.22 (release_shims; required there, not before).
    fused = any(fused_entry_bytes(self, pool) is not None for pool in ("full", "swa"))
    if fused or type(configurator) not in (DefaultPoolConfigurator, HybridSWAPoolConfigurator):
        reason = "a fused draft pool" if fused else f"{type(configurator).__name__} pools"
        logger.warning(
            "[specinit] stock sglang %s KV sizing (draft priced at the target's geometry): "
            "%s are not priced by sglang-specinit%s",
            installed_sglang_version(),
            reason,
            bind_early(sizing, priced=False),
        )
        return original(self, pre_model_load_memory)
    try:
        # Priced before free memory is profiled: the probe pools are gone by then.
        start = time.perf_counter()
        prices = price_pools(self, sizing)
        sizing.pricing_seconds = time.perf_counter() - start
    except Exception as exc:  # any pool 0.5.23 cannot build tiny is not ours to size
        logger.warning(
            "[specinit] stock sglang %s KV sizing (draft priced at the target's geometry): "
            "the pools of this launch could not be priced by building them (%s: %s)%s",
            installed_sglang_version(),
            type(exc).__name__,
            exc,
            bind_early(sizing, priced=False),
        )
        return original(self, pre_model_load_memory)
    bind_early(sizing, priced=True)
    return _resolve(self, configurator, sizing, pre_model_load_memory, prices)


def bind_early(sizing: TargetSizing, *, priced: bool) -> str:
    """Run the sizing's early binding once, now that the hook knows whether it prices this
    pool (``TargetSizing.bind_early``; nothing on a stage without the draft). Where it does
    not, the binding is vetted as on any stock-sized launch: the duplicates stay where stock
    leaves them unless stock's reserve covers the draft. Returns "; " + the binding's log
    clause, or ""."""
    binder, sizing.bind_early = sizing.bind_early, None
    if binder is None:
        return ""
    note = binder(priced)
    return f"; {note}" if note else ""


def price_configurators(
    target: Any, pool_drafts: list[Any], fixed_drafts: list[tuple[Any, int]]
) -> Prices:
    """(target pool, draft pools, draft fixed-pool bytes), each priced by building it with
    0.5.23's own pool code at tiny sizes (:mod:`.pool_probe`), per target row, for whatever
    layout this launch allocates (DSA index-K, FP8 scales, DCP-replicated drafts ...).

    ``target`` / ``pool_drafts`` are configurators; ``fixed_drafts`` pairs a configurator with
    the fixed token count its pool gets (frozen-KV MTP's stand-in)."""
    split = pool_probe.target_split(target)
    return (
        pool_probe.measure_configurator(target, split),
        tuple(pool_probe.measure_configurator(kvc, split) for kvc in pool_drafts),
        # A fixed-size pool is priced as token-sized ones are (its constant pointer tables
        # are left to the 1 - f share), at its own token count.
        sum(
            pool_probe.measure_configurator(kvc, split).pool_bytes(tokens, int(kvc.page_size))
            for kvc, tokens in fixed_drafts
        ),
    )


def price_pools(kvc: Any, sizing: TargetSizing) -> Prices:
    """:func:`price_configurators` for this launch: the target's configurator and one built
    for each draft runner the way its ``alloc_memory_pool`` will build it."""
    described = sizing.draft
    return price_configurators(
        kvc,
        [pool_probe.draft_configurator(r) for r in described.pool_runners],
        [(pool_probe.draft_configurator(r), tokens) for r, tokens in described.fixed_pools],
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
    # SGLang's own constraints: the user cap and, under pipeline parallelism, the MIN
    # all-reduce over every rank. Every rank reaches it exactly once, priced or stock
    # (stock's config_from_budget calls it once too), so the collectives line up.
    tokens = kvc._apply_token_constraints(plan.tokens)
    if tokens != plan.tokens:
        # Another stage affords fewer: the breakdown shows the pools this rank really builds.
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
    config.max_running_requests = kvc.resolve_max_num_reqs(config.max_total_num_tokens)
    config = configurator.finalize_with_max_running_requests(config)
    config.mem_fraction_static = schedule_of(kvc).mem_fraction_static
    return config


def _resolve_dsv4(
    original: Any, kvc: Any, configurator: Any, sizing: TargetSizing, pre_model_load_memory: float
) -> Any:
    """A DeepSeek-V4 target: SGLang's own DSV4 solve with the draft's real term
    (:mod:`.dsv4_sizing`), its answer checked against the pools it builds."""

    reason = dsv4_sizing.unpriced_reason(configurator)
    if reason is None and (sizing.draft.fixed_pools or not sizing.draft.pool_runners):
        reason = "a DeepSeek-V4 draft without a token-sized pool"
    if reason is not None:
        logger.warning(
            "[specinit] stock sglang %s KV sizing (draft reserved as (T + 1) / T target "
            "layers): %s is not priced by sglang-specinit%s",
            installed_sglang_version(),
            reason,
            bind_early(sizing, priced=False),
        )
        return original(kvc, pre_model_load_memory)
    try:
        start = time.perf_counter()
        drafts = [pool_probe.draft_configurator(r) for r in sizing.draft.pool_runners]
        split = pool_probe.target_split(kvc)
        draft_prices = tuple(pool_probe.measure_configurator(d, split) for d in drafts)
        priced = dsv4_sizing.priced_configurator(kvc, draft_prices)
        sizing.pricing_seconds = time.perf_counter() - start
    except Exception as exc:  # a pool 0.5.23 cannot build tiny is not ours to size
        logger.warning(
            "[specinit] stock sglang %s KV sizing: the DeepSeek-V4 draft pool could not be "
            "priced by building it (%s: %s)%s",
            installed_sglang_version(),
            type(exc).__name__,
            exc,
            bind_early(sizing, priced=False),
        )
        return original(kvc, pre_model_load_memory)
    # Bound once priced: a solve that fails below keeps stock's V4 solve, whose (T + 1) / T
    # reserve holds more than the NextN draft allocates (test_dsv4_never_worse_than_stock).
    bind_early(sizing, priced=True)
    try:
        return _solve_dsv4(kvc, sizing, pre_model_load_memory, priced, draft_prices, drafts)
    except SpecInitBudgetError:
        raise  # a launch that cannot fit one page stops, as every priced launch does
    except Exception as exc:
        # No V4 launch has run here (V4 is CUDA-only): a layout the solve does not expect keeps
        # stock's own solve rather than stopping the launch.
        sizing.inputs = sizing.plan = None
        logger.warning(
            "[specinit] stock sglang %s KV sizing: the DeepSeek-V4 solve with the draft's "
            "measured term failed (%s: %s)",
            installed_sglang_version(),
            type(exc).__name__,
            exc,
        )
        return original(kvc, pre_model_load_memory)


def _solve_dsv4(
    kvc: Any,
    sizing: TargetSizing,
    pre_model_load_memory: float,
    priced: Any,
    draft_prices: tuple[Any, ...],
    drafts: list[Any],
) -> Any:
    """SGLang's V4 solve on the priced configurator, fitted to the pools it builds; fills
    ``sizing.inputs`` / ``sizing.plan`` for the breakdown."""
    available = kvc._profile_available_bytes(pre_model_load_memory)
    padding = dsv4_sizing.draft_padding_bytes(draft_prices)
    config = dsv4_sizing.solve(kvc, priced, available, padding)
    config = dsv4_sizing.fitted(kvc, priced, config, available, drafts)
    target_spec = dsv4_sizing.target_display_spec(priced)
    readings = read_sizing(
        kvc, sizing, pre_model_load_memory, available, (target_spec, draft_prices, 0)
    )
    inputs, _ = plan_from_readings(readings, refuse_too_few=False)
    built = (
        dsv4_sizing.built_pool_bytes(kvc, config),
        sum(dsv4_sizing.built_pool_bytes(d, config) for d in drafts),
    )
    at_profile = int(schedule_of(kvc).mem_fraction_static * inputs.pre_load_free_bytes) - available
    over = sum(built) > available  # fitted stepped down to one page and it still does not fit
    plan = dsv4_sizing.plan_of(
        "specinit",
        inputs,
        config,
        built,
        dsv4_sizing.draft_bytes_per_row(priced, draft_prices),
        float(priced.bytes_per_full_token),
        # Refused: the fraction that holds what is resident and those pools.
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
    """AROUND hook: the post-capture resize never sizes past this package's prices.

    With ``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1`` (CUDA only) 0.5.23 re-sizes the KV pools
    after graph capture from the memory then free, through this method with ``cap_tokens`` =
    the pre-capture count and stock's rule (draft at the target's geometry). For a target this
    package sized, what the post-capture budget buys at the prices the pools really cost
    enters SGLang's token sync with stock's count (:func:`apply_token_constraints`): SGLang's
    own method does the rest, so the result is the smallest of the pre-capture count, stock's
    re-pricing and this package's, and under pipeline parallelism one count on every stage
    (SGLang applies ``cap_tokens`` after its MIN over stages; a per-stage cap there would not
    be).
    """
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
    """AROUND hook: inside a post-capture resize this package sized (:func:`config_from_budget`),
    the count entering SGLang's user cap and PP MIN all-reduce is at most what the budget buys
    at real prices; everywhere else (pre-capture sizing, stock launches) SGLang's method as is."""
    cap = _PRE_SYNC_CAP.get(id(self))
    if cap is not None:
        token_capacity = min(token_capacity, cap)
    return original(self, token_capacity)


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
