"""The KV-cache budget model, per attention-TP rank in bytes (no torch, no sglang import)::

    tokens = page_floor((f * pre_load_free - resident - fixed) // kv_bytes_per_token)

The runtime and the planner both call :func:`plan_pools`, so what is predicted is allocated."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

GIB = 1 << 30

# A request needs max_req_len > 0 and max_req_input_len = max_req_len - 5 > 0 (TpModelWorker),
# so a pool below 7 tokens cannot serve anything.
MIN_SERVABLE_TOKENS = 7


class BudgetError(ValueError):
    """The inputs describe something the budget model cannot price; the message says why."""


class KVSpec(Protocol):
    """A pool's price as the budget reads it (the runtime's and the planner's specs are
    :class:`MeasuredKVSpec`, built by SGLang's own pool code)."""

    def bytes_per_token(self) -> float: ...

    def padding_bytes(self, page_size: int) -> int: ...

    def pool_bytes(self, tokens: int, page_size: int) -> int: ...


@dataclass(frozen=True)
class MeasuredKVSpec:
    """A pool priced by building it with SGLang's own pool code; a draft pool's SWA tokens
    follow the target's split (``ratio_applies``)."""

    full_bytes_per_token: int
    swa_bytes_per_token: int = 0
    fixed_bytes: int = 0
    swa_full_tokens_ratio: float = 1.0
    ratio_applies: bool = False

    def bytes_per_token(self) -> float:
        ratio = self.swa_full_tokens_ratio if self.ratio_applies else 1.0
        return self.full_bytes_per_token + ratio * self.swa_bytes_per_token

    def padding_bytes(self, page_size: int) -> int:
        return self.fixed_bytes

    def pool_bytes(self, tokens: int, page_size: int) -> int:
        swa_tokens = tokens
        if self.ratio_applies:
            swa_tokens = int(tokens * self.swa_full_tokens_ratio) // page_size * page_size
        full = self.full_bytes_per_token * tokens
        return full + self.swa_bytes_per_token * swa_tokens + self.fixed_bytes


def kv_pool_bytes(spec: KVSpec, tokens: int, page_size: int) -> int:
    return spec.pool_bytes(tokens, page_size)


@dataclass(frozen=True)
class DraftSpec:
    """What a draft worker allocates: one KV spec per pool it owns (multi-layer EAGLE one per
    step), ``weight_bytes`` once the tensors it shares with the target are bound."""

    algorithm: str
    kv_pools: tuple[KVSpec, ...] = ()
    weight_bytes: int = 0
    # The embed/lm_head the target also holds, freed once bound.
    shared_weight_bytes: int = 0
    bytes_per_request: int = 0
    fixed_bytes: int = 0
    # The d of stock's reserve, int(target_cell * (1 + d/n)).
    upstream_reserved_layers: int = 0

    def kv_bytes_per_token(self) -> float:
        return sum(pool.bytes_per_token() for pool in self.kv_pools)

    def padding_bytes(self, page_size: int) -> int:
        return sum(pool.padding_bytes(page_size) for pool in self.kv_pools)


@dataclass(frozen=True)
class BudgetInputs:
    """Everything the sizing depends on, per attention-TP rank."""

    pre_load_free_bytes: int
    mem_fraction_static: float
    target_kv: KVSpec
    target_weight_bytes: int
    page_size: int = 1
    context_len: int = 4096
    draft: DraftSpec | None = None
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    dp_size: int = 1
    # Pre-load free minus free after loading; replaces the weights' sum (the runtime measures).
    measured_resident_bytes: int | None = None
    # Taken from the KV budget before sizing (mamba state).
    reserved_bytes: int = 0

    def validate(self) -> None:
        if not 0.0 < self.mem_fraction_static < 1.0:
            raise BudgetError(
                f"--mem-fraction-static must be in (0, 1), got {self.mem_fraction_static}"
            )
        if self.page_size < 1:
            raise BudgetError(f"--page-size must be >= 1, got {self.page_size}")
        if self.pre_load_free_bytes <= 0:
            raise BudgetError(f"free device memory must be > 0, got {self.pre_load_free_bytes}")
        if self.max_total_tokens is not None and self.max_total_tokens <= 0:
            raise BudgetError(f"--max-total-tokens must be > 0, got {self.max_total_tokens}")


@dataclass(frozen=True)
class PoolPlan:
    """The sizes one rule produces for one set of inputs (per attention-TP rank, bytes)."""

    rule: str
    tokens: int
    max_running_requests: int
    page_size: int
    budget_bytes: int
    resident_bytes: int
    target_weight_bytes: int
    draft_weight_bytes: int
    target_kv_bytes_per_token: float
    draft_kv_bytes_per_token: float
    # What the rule charged per token, which may differ from the real cost.
    priced_bytes_per_token: float
    target_kv_pool_bytes: int
    draft_kv_pool_bytes: int
    draft_request_bytes: int
    min_viable_mem_fraction_static: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    draft_fixed_bytes: int = 0

    @property
    def used_bytes(self) -> int:
        return (
            self.resident_bytes
            + self.target_kv_pool_bytes
            + self.draft_kv_pool_bytes
            + self.draft_request_bytes
            + self.draft_fixed_bytes
        )

    @property
    def headroom_bytes(self) -> int:
        """Budget left unused (negative: the rule overshoots --mem-fraction-static)."""
        return self.budget_bytes - self.used_bytes

    @property
    def suggested_mem_fraction_static(self) -> float:
        return math.ceil(self.min_viable_mem_fraction_static * 1000) / 1000


def page_floor(tokens: int, page_size: int) -> int:
    return tokens // page_size * page_size


def page_ceil(tokens: int, page_size: int) -> int:
    return -(-tokens // page_size) * page_size


def derive_max_running_requests(
    tokens: int, context_len: int, user_value: int | None, dp_size: int = 1
) -> int:
    """max_running_requests as SGLang derives it from the final token count."""
    estimated = max(min(int(tokens / context_len * 512), 4096), 2048)
    if user_value is not None:
        return min(user_value // dp_size, estimated)
    return min(estimated, tokens // 2)


def static_budget_bytes(inputs: BudgetInputs) -> int:
    return int(inputs.mem_fraction_static * inputs.pre_load_free_bytes)


def draft_weight_bytes_of(inputs: BudgetInputs) -> int:
    return inputs.draft.weight_bytes if inputs.draft is not None else 0


def resident_with_duplicates(inputs: BudgetInputs) -> int:
    """What stock has resident when it profiles: both models and the draft's duplicate
    embed/lm_head, which this package frees before sizing."""
    draft = inputs.draft
    return resident_after_sizing(inputs) + (draft.shared_weight_bytes if draft is not None else 0)


def resident_after_sizing(inputs: BudgetInputs) -> int:
    if inputs.measured_resident_bytes is not None:
        return inputs.measured_resident_bytes
    return inputs.target_weight_bytes + draft_weight_bytes_of(inputs)


def _most_tokens_within(kv_bytes: float, per_token: float, page_size: int) -> int:
    """The most whole pages whose price fits ``kv_bytes``: a fractional hybrid-SWA price can
    make SGLang's float floor one page off either way."""
    if kv_bytes <= 0 or per_token <= 0:
        return 0
    tokens = page_floor(int(kv_bytes // per_token), page_size)
    while (tokens + page_size) * per_token <= kv_bytes:
        tokens += page_size
    while tokens > 0 and tokens * per_token > kv_bytes:
        tokens -= page_size
    return tokens


def tokens_within_pool_budget(pools: Sequence[KVSpec], pool_bytes: int, page_size: int) -> int:
    fixed = sum(pool.padding_bytes(page_size) for pool in pools)
    per_token = sum(pool.bytes_per_token() for pool in pools)
    return _most_tokens_within(pool_bytes - fixed, per_token, page_size)


def cap_tokens(tokens: int, inputs: BudgetInputs) -> int:
    if inputs.max_total_tokens is not None and inputs.max_total_tokens < tokens:
        return page_floor(inputs.max_total_tokens, inputs.page_size)
    return tokens


def make_plan(
    rule: str,
    inputs: BudgetInputs,
    tokens: int,
    resident: int,
    priced_per_token: float,
    min_viable: float,
    notes: tuple[str, ...] = (),
    derive_max_reqs: Callable[..., int] = derive_max_running_requests,
) -> PoolPlan:
    """Every rule prices its pools here, so rules differ only in how they choose ``tokens``."""
    draft = inputs.draft
    max_reqs = derive_max_reqs(
        tokens, inputs.context_len, inputs.max_running_requests, inputs.dp_size
    )
    target_pool = draft_pool = draft_request = 0
    if tokens > 0:
        target_pool = kv_pool_bytes(inputs.target_kv, tokens, inputs.page_size)
    if draft is not None and tokens > 0:
        draft_pool = sum(kv_pool_bytes(pool, tokens, inputs.page_size) for pool in draft.kv_pools)
        draft_request = draft.bytes_per_request * (max_reqs + 1)
    return PoolPlan(
        rule=rule,
        tokens=tokens,
        max_running_requests=max_reqs,
        page_size=inputs.page_size,
        budget_bytes=static_budget_bytes(inputs),
        resident_bytes=resident,
        target_weight_bytes=inputs.target_weight_bytes,
        draft_weight_bytes=draft_weight_bytes_of(inputs),
        target_kv_bytes_per_token=inputs.target_kv.bytes_per_token(),
        draft_kv_bytes_per_token=draft.kv_bytes_per_token() if draft is not None else 0,
        priced_bytes_per_token=priced_per_token,
        target_kv_pool_bytes=target_pool,
        draft_kv_pool_bytes=draft_pool,
        draft_request_bytes=draft_request,
        min_viable_mem_fraction_static=min_viable,
        notes=notes,
        draft_fixed_bytes=draft.fixed_bytes if draft is not None else 0,
    )


def plan_pools(inputs: BudgetInputs) -> PoolPlan:
    """This package's rule: every draft byte at the draft's own geometry. Per-request buffers
    are charged at the most requests SGLang can derive, whatever ``tokens`` turns out to be."""
    inputs.validate()
    draft = inputs.draft
    page = inputs.page_size
    per_token = inputs.target_kv.bytes_per_token()
    fixed = inputs.reserved_bytes + inputs.target_kv.padding_bytes(page)
    if draft is not None:
        per_token += draft.kv_bytes_per_token()
        fixed += draft.padding_bytes(page) + draft.fixed_bytes
        if draft.bytes_per_request:
            worst_reqs = (
                inputs.max_running_requests // inputs.dp_size
                if inputs.max_running_requests is not None
                else 4096
            )
            fixed += draft.bytes_per_request * (worst_reqs + 1)
    resident = resident_after_sizing(inputs)
    kv_budget = static_budget_bytes(inputs) - resident - fixed
    tokens = cap_tokens(_most_tokens_within(kv_budget, per_token, page), inputs)
    needed = resident + fixed + page_ceil(MIN_SERVABLE_TOKENS, page) * per_token
    min_viable = needed / inputs.pre_load_free_bytes
    return make_plan("specinit", inputs, tokens, resident, per_token, min_viable)
