"""Stock sglang 0.5.13 / 0.5.13.post1's sizing, modelled on the budget model's inputs.

The target pool is sized before the draft exists: draft weights and KV land on top of the
budget. The plugin's runtime never calls this; the planner's stock column in a 0.5.13.x
environment, the tests and the benchmark do. It takes the same :class:`~budget.BudgetInputs`
as :func:`budget.plan_pools` and returns a :class:`~budget.PoolPlan` priced by
:func:`budget.make_plan`, so the columns differ only in how each rule picks ``tokens``.
"""

from __future__ import annotations

from sglang_specinit.budget import (
    BudgetInputs,
    PoolPlan,
    cap_tokens,
    draft_weight_bytes_of,
    floor_tokens,
    make_plan,
    scaled_target_cell,
    static_budget_bytes,
)


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
        per_token = scaled_target_cell(inputs.target_kv, draft.upstream_reserved_layers, ceil=True)
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


# The rule the planner looks up by release (compat.adapter_module_for_release).
stock_plan = stock_0_5_13_plan
