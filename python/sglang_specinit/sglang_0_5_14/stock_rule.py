"""Stock sglang 0.5.14's sizing rule, modelled on the budget model's inputs (geometric KV specs).

``cell = int(target_cell * (1 + d/n))`` after both models' weights load, the draft's duplicate
embed/lm_head resident at profiling. Used where the target's KV spec is geometric (the
0.5.13.x planner's ``--sglang-version 0.5.14``, the tests, the benchmark); the plugin's runtime
never calls it.
"""

from __future__ import annotations

from sglang_specinit.budget import (
    BudgetInputs,
    PoolPlan,
    cap_tokens,
    derive_max_running_requests,
    draft_weight_bytes_of,
    floor_tokens,
    make_plan,
    scaled_target_cell,
    static_budget_bytes,
    uniform_layers,
)


def _max_running_requests_0_5_14(
    tokens: int, context_len: int, user_value: int | None, dp_size: int = 1
) -> int:
    """0.5.14's ``_resolve_max_num_reqs``: a user value is clamped to ``tokens // 2`` instead of
    the 2048..4096 estimate (14:model_runner_kv_cache_mixin.py:988-994)."""
    if user_value is not None:
        return min(user_value // dp_size, tokens // 2)
    return derive_max_running_requests(tokens, context_len, None, dp_size)


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
            per_token = scaled_target_cell(inputs.target_kv, d, ceil=True)
        elif d > 0 and uniform_layers(inputs.target_kv) > 0:
            per_token = scaled_target_cell(inputs.target_kv, d, ceil=False)
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


# The rule the planner looks up by release (compat.adapter_module_for_release).
stock_plan = upstream_0_5_14_plan
