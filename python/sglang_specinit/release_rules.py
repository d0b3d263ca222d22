"""What other SGLang releases would size from the same inputs: one rule function per release.

:mod:`sglang_specinit.budget` is this package's model; the functions here reproduce the rules
SGLang itself applies, for the side-by-side reports of the planner, the tests and the benchmark
(the plugin's runtime never calls them). Each takes the same :class:`~budget.BudgetInputs` as
:func:`budget.plan_pools` and returns a :class:`~budget.PoolPlan` priced by the same
:func:`budget.make_plan`, so a report's columns differ only in how each rule picks ``tokens``::

    release   rule                   what that release does without the plugin
    0.5.13    stock_0_5_13_plan      sizes the target pool before the draft exists
    0.5.14    upstream_0_5_14_plan   prices the draft at the target's per-layer geometry,
                                     duplicate embed/lm_head resident at profiling
    0.5.23    upstream_0_5_23_plan   as 0.5.14, pools sized without their padding page,
                                     DFLASH priced at its own cell

``RULES`` maps those release names to the functions (0.5.13 stands for 0.5.13.post1 too).
"""

from __future__ import annotations

from collections.abc import Callable

from sglang_specinit.budget import (
    AttentionKVSpec,
    BudgetInputs,
    DraftSpec,
    HybridSWAKVSpec,
    KVSpec,
    PoolPlan,
    cap_tokens,
    derive_max_running_requests,
    draft_weight_bytes_of,
    floor_tokens,
    make_plan,
    static_budget_bytes,
)


def _max_running_requests_0_5_14(
    tokens: int, context_len: int, user_value: int | None, dp_size: int = 1
) -> int:
    """0.5.14's ``_resolve_max_num_reqs``: a user value is clamped to ``tokens // 2`` instead of
    the 2048..4096 estimate (14:model_runner_kv_cache_mixin.py:988-994)."""
    if user_value is not None:
        return min(user_value // dp_size, tokens // 2)
    return derive_max_running_requests(tokens, context_len, None, dp_size)


def stock_0_5_13_plan(inputs: BudgetInputs) -> PoolPlan:
    """SGLang 0.5.13.post1: the target pool is sized before the draft exists.

    Draft weights and draft KV then land on top of the budget (except DFLASH, whose layers are
    reserved at the target's geometry, and FROZEN_KV_MTP, which owns no pool).
    """
    inputs.validate()
    draft = inputs.draft
    page = inputs.page_size
    per_token = inputs.target_kv.bytes_per_token()
    if draft is not None and draft.algorithm == "DFLASH" and draft.upstream_reserved_layers:
        per_token = _scaled_target_cell(inputs.target_kv, draft.upstream_reserved_layers, ceil=True)
    # The measured resident bytes include the draft only in the phased runtime; stock never
    # sees them, so it always works from the target's weights.
    resident_for_sizing = inputs.target_weight_bytes
    kv_budget = static_budget_bytes(inputs) - resident_for_sizing - inputs.reserved_bytes
    tokens = cap_tokens(floor_tokens(kv_budget, per_token, page), inputs)
    min_viable = (resident_for_sizing + inputs.reserved_bytes) / inputs.pre_load_free_bytes
    notes: tuple[str, ...] = ()
    if draft is not None:
        notes = ("draft weights and KV are allocated after the target pool, outside the budget",)
    return make_plan(
        "stock-0.5.13",
        inputs,
        tokens,
        inputs.target_weight_bytes + draft_weight_bytes_of(inputs),
        per_token,
        min_viable,
        notes,
    )


def upstream_0_5_14_plan(inputs: BudgetInputs) -> PoolPlan:
    """SGLang 0.5.14's rule: ``cell = int(target_cell * (1 + d/n))`` after both weights load.

    The draft's duplicate embed/lm_head are still resident when the pool is profiled, the draft
    is priced at the target's per-layer geometry, and an explicit ``num_nextn_predict_layers: 0``
    reserves nothing (``upstream_reserved_layers`` carries the d upstream would use).
    """
    inputs.validate()
    draft = inputs.draft
    page = inputs.page_size
    per_token: float = inputs.target_kv.bytes_per_token()
    resident = inputs.target_weight_bytes
    notes: list[str] = []
    if draft is not None:
        d = draft.upstream_reserved_layers
        if draft.algorithm == "DFLASH" and d:
            per_token = _scaled_target_cell(inputs.target_kv, d, ceil=True)
        elif d > 0 and isinstance(inputs.target_kv, AttentionKVSpec):
            per_token = _scaled_target_cell(inputs.target_kv, d, ceil=False)
        elif d > 0:
            notes.append("0.5.14 reserves no draft KV for hybrid-SWA targets")
        if draft.algorithm != "FROZEN_KV_MTP":
            # Weights counted, duplicate embed/lm_head still resident at profiling time.
            resident += draft.weight_bytes + draft.shared_weight_bytes
        else:
            notes.append("0.5.14 sizes the target pool before the frozen-KV draft loads")
    kv_budget = static_budget_bytes(inputs) - resident - inputs.reserved_bytes
    tokens = cap_tokens(floor_tokens(kv_budget, per_token, page), inputs)
    min_viable = (resident + inputs.reserved_bytes) / inputs.pre_load_free_bytes
    final_resident = inputs.target_weight_bytes + draft_weight_bytes_of(inputs)
    return make_plan(
        "upstream-0.5.14",
        inputs,
        tokens,
        final_resident,
        per_token,
        min_viable,
        tuple(notes),
        derive_max_reqs=_max_running_requests_0_5_14,
    )


def _scaled_target_cell(target: AttentionKVSpec, draft_layers: int, ceil: bool) -> float:
    """The target cell scaled by (n + d) / n, as 0.5.14 (int) and DFLASH (ceil) do it."""
    cell = target.bytes_per_token()
    n = target.num_layers
    if n <= 0:
        return cell
    if ceil:
        return -(-cell * (n + draft_layers) // n)
    return int(cell * (1 + draft_layers / n))


def _max_running_requests_0_5_23(
    tokens: int, context_len: int, user_value: int | None, dp_size: int = 1
) -> int:
    """0.5.23's ``KVCacheConfigurator.resolve_max_num_reqs`` (mamba cap aside): a user value
    is taken per DP worker, at least 1, and clamped to ``tokens // 2``."""
    if user_value is not None:
        return min(max(1, user_value // dp_size), tokens // 2)
    return derive_max_running_requests(tokens, context_len, None, dp_size)


def _upstream_0_5_23_cell(target: KVSpec, draft: DraftSpec | None) -> float:
    """What 0.5.23's pool configurators charge per token for target + draft.

    Default configurator: ``cell + int(cell * d / n)``. Hybrid-SWA: ``d`` extra layers at the
    target's full-attention geometry. DFLASH: the draft's own cell (0.5.18+ prices it exactly).
    ``d`` is ``DraftSpec.upstream_reserved_layers`` (0: nothing reserved, as for an explicit
    ``num_nextn_predict_layers: 0``).
    """
    cell = target.bytes_per_token()
    if draft is None:
        return cell
    if draft.algorithm == "DFLASH":
        return cell + draft.kv_bytes_per_token()
    d = draft.upstream_reserved_layers
    if d <= 0:
        return cell
    if isinstance(target, HybridSWAKVSpec):
        full = target.full
        if full.num_layers <= 0:
            return cell + d * target.swa.unpacked_bytes_per_token() / max(target.swa.num_layers, 1)
        return cell + d * full.unpacked_bytes_per_token() // full.num_layers
    if not isinstance(target, AttentionKVSpec) or target.num_layers <= 0:
        return cell
    return cell + int(cell * d / target.num_layers)


def upstream_0_5_23_plan(inputs: BudgetInputs) -> PoolPlan:
    """SGLang 0.5.23's rule, with its phased init (weights of both models loaded first).

    The target pool is profiled while the draft's duplicate embed/lm_head are still resident
    (``shared_weight_bytes``; freed right after, so they end up unused), the draft is priced at
    the target's per-layer geometry (``upstream_reserved_layers`` layers; frozen-KV MTP is
    reserved layers it never allocates), and pools are sized without their padding page.
    """
    inputs.validate()
    draft = inputs.draft
    page = inputs.page_size
    per_token = _upstream_0_5_23_cell(inputs.target_kv, draft)
    resident_at_profile = inputs.target_weight_bytes
    if draft is not None:
        resident_at_profile += draft.weight_bytes + draft.shared_weight_bytes
    kv_budget = static_budget_bytes(inputs) - resident_at_profile - inputs.reserved_bytes
    tokens = cap_tokens(floor_tokens(kv_budget, per_token, page), inputs)
    min_viable = (resident_at_profile + inputs.reserved_bytes) / inputs.pre_load_free_bytes
    notes: list[str] = []
    if draft is not None and draft.shared_weight_bytes:
        notes.append("0.5.23 profiles while the draft's duplicate embed/lm_head are resident")
    if (
        draft is not None
        and draft.kv_bytes_per_token() > per_token - inputs.target_kv.bytes_per_token()
    ):
        notes.append("0.5.23 reserves less draft KV per token than the draft allocates")
    return make_plan(
        "upstream-0.5.23",
        inputs,
        tokens,
        inputs.target_weight_bytes + draft_weight_bytes_of(inputs),
        per_token,
        min_viable,
        tuple(notes),
        derive_max_reqs=_max_running_requests_0_5_23,
    )


RULES: dict[str, Callable[[BudgetInputs], PoolPlan]] = {
    "0.5.13": stock_0_5_13_plan,
    "0.5.14": upstream_0_5_14_plan,
    "0.5.23": upstream_0_5_23_plan,
}
