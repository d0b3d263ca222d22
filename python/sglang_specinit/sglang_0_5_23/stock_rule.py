"""Stock sglang 0.5.23's sizing rule, modelled on the budget model's inputs.

What the 0.5.13.x planner prints for ``--sglang-version 0.5.23`` and what the unit tests check
against 0.5.23's own configurators (``test/sglang_0_5_23/test_stock_and_identity.py``). In a
0.5.23-generation environment the planner's stock column is the release's own configurator
instead (``planner_replay.stock_plan_0_5_23``); the plugin's runtime never calls this.
"""

from __future__ import annotations

from sglang_specinit.budget import (
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
    uniform_layers,
)


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
    n = uniform_layers(target)
    if n <= 0:
        return cell
    return cell + int(cell * d / n)


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


# The rule the planner looks up by release (compat.adapter_module_for_release).
stock_plan = upstream_0_5_23_plan
