"""The refusals a launch makes before it serves, made by ``plan`` on the resolved launch, each
in one line."""

from __future__ import annotations

from typing import Any

from sglang_specinit.budget import MIN_SERVABLE_TOKENS, BudgetInputs, PoolPlan, page_ceil
from sglang_specinit.live_sizing import SpecInitBudgetError, budget_error_message
from sglang_specinit.planner.inputs import PlanError


def check_eagle3_draft(args: Any) -> None:
    """EAGLE3 with no draft path: SGLang loads the target checkpoint as the draft, which has
    no EAGLE3 hot-token map, and every rank fails."""
    if args.speculative_algorithm == "EAGLE3" and not args.speculative_draft_model_path:
        raise PlanError(
            "--speculative-algorithm EAGLE3 without --speculative-draft-model-path: SGLang "
            "loads the target checkpoint as the draft, which has no EAGLE3 head, and every "
            "rank fails to start; pass --speculative-draft-model-path an EAGLE3 draft"
        )


def check_one_stage(args: Any) -> None:
    """The planner prices one rank of one stage; a pipeline's stages differ in layers, weights
    and free memory, so it plans none rather than a wrong one."""
    pp = int(getattr(args, "pp_size", 1) or 1)
    if pp > 1:
        raise PlanError(
            f"--pp-size {pp}: the planner plans one pipeline stage and the stages differ in "
            "layers and weights; plan without --pp-size (the server logs each stage's "
            "breakdown)"
        )


def check_head_split(
    hf_config: Any, attn_tp_size: int, what: str, *, mla: bool, device: str | None
) -> None:
    """The head split SGLang's attention layers assert on every rank (device cpu pads instead):
    query heads divide over attention-TP ranks, KV heads divide or replicate whole."""
    if device == "cpu":
        return
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    heads = getattr(text, "num_attention_heads", None)
    if not isinstance(heads, int) or heads <= 0 or attn_tp_size <= 1:
        return
    valid = [tp for tp in range(1, heads + 1) if heads % tp == 0 and _kv_fits(text, tp, mla)]
    if heads % attn_tp_size == 0 and _kv_fits(text, attn_tp_size, mla):
        return
    kv = getattr(text, "num_key_value_heads", None)
    kv_part = "" if mla or not isinstance(kv, int) else f", {kv} KV heads"
    raise PlanError(
        f"{what} has {heads} attention heads{kv_part}: an attention-TP size of {attn_tp_size} "
        f"does not split them (every rank asserts it); pass a --tp-size that does: "
        f"{', '.join(map(str, valid))}"
    )


def _kv_fits(text: Any, tp: int, mla: bool) -> bool:
    kv = getattr(text, "num_key_value_heads", None)
    if mla or not isinstance(kv, int) or kv <= 0:
        return True
    return kv % tp == 0 if kv >= tp else tp % kv == 0


def check_draft_steps(args: Any) -> None:
    """EAGLE's chain of draft steps at top-k 1 is built with one buffer per step: a negative
    count fails on every rank (torch.arange's bounds)."""
    steps, topk = args.speculative_num_steps, args.speculative_eagle_topk
    if args.speculative_algorithm in ("EAGLE", "EAGLE3") and topk == 1 and (steps or 0) < 0:
        raise PlanError(
            f"--speculative-num-steps {steps}: a negative number of draft steps fails on every "
            "rank; pass --speculative-num-steps 0 or more"
        )


def check_request_length(context_len: int, tokens: int, shortest: int) -> None:
    """The scheduler's longest request, min(context length, pool tokens) - 1, must reach
    ``shortest`` tokens (the release's), or every rank asserts the pool is too small."""
    if min(context_len, tokens) - 1 >= shortest or tokens - 1 < shortest:
        return  # a pool too small for it is check_servable's refusal
    raise PlanError(
        f"--context-length {context_len}: the longest request it leaves ({context_len - 1} "
        f"tokens) is shorter than the {shortest} every rank requires (it asserts 'Memory pool "
        f"size is too small'); pass --context-length {shortest + 1} or more"
    )


def check_servable(inputs: BudgetInputs, plan: PoolPlan) -> None:
    """The pool phase's refusal, with its message: weights that leave no room for one page."""
    if plan.tokens < page_ceil(MIN_SERVABLE_TOKENS, inputs.page_size):
        message = budget_error_message(inputs, plan).removeprefix("sglang-specinit: ")
        raise SpecInitBudgetError(message)
