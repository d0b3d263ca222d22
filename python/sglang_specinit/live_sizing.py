"""The runtime sizing every adapter shares (no SGLang import): readings from SGLang's objects ->
``budget.plan_pools`` -> the too-few-tokens refusal."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sglang_specinit.budget import (
    GIB,
    MIN_SERVABLE_TOKENS,
    BudgetInputs,
    DraftSpec,
    KVSpec,
    PoolPlan,
    page_ceil,
    plan_pools,
)
from sglang_specinit.report import human_bytes


@dataclass
class DraftDescription:
    algorithm: str = ""
    weight_runners: list[Any] = field(default_factory=list)
    # Runners that get a KV pool of the target's token count.
    pool_runners: list[Any] = field(default_factory=list)
    # (runner, tokens) of fixed-size pools (frozen-KV MTP's stand-in).
    fixed_pools: list[tuple[Any, int]] = field(default_factory=list)
    # Bytes per req-to-token row of per-request draft buffers.
    bytes_per_request: int = 0


def _storage_key_and_bytes(tensor: Any) -> tuple[Any, int]:
    """A wrapper subclass without a readable storage (torchao, DTensor) counts its own size."""
    try:
        storage = tensor.untyped_storage()
        return storage.data_ptr(), int(storage.nbytes())
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):
        return ("tensor", id(tensor)), int(tensor.numel() * tensor.element_size())


def storage_bytes(modules: Iterable[Any], exclude: Iterable[Any] = ()) -> dict[Any, int]:
    excluded = set(exclude)
    storages: dict[Any, int] = {}
    for module in modules:
        for tensor in [*module.parameters(), *module.buffers()]:
            key, size = _storage_key_and_bytes(tensor)
            if key not in excluded:
                storages[key] = size
    return storages


class SpecInitBudgetError(ValueError):
    """The weights leave no room for the KV cache under --mem-fraction-static."""


def budget_error_message(inputs: BudgetInputs, plan: PoolPlan) -> str:
    hb = human_bytes
    return (
        f"sglang-specinit: the loaded weights leave no room for the KV cache under "
        f"--mem-fraction-static={inputs.mem_fraction_static}: budget {hb(plan.budget_bytes)} "
        f"of {hb(inputs.pre_load_free_bytes)} free before loading, resident "
        f"{hb(plan.resident_bytes)} (target weights {hb(plan.target_weight_bytes)}, "
        f"draft weights {hb(plan.draft_weight_bytes)}), KV per token "
        f"{plan.target_kv_bytes_per_token:.0f} B target + {plan.draft_kv_bytes_per_token:.0f} B "
        f"draft. Pass --mem-fraction-static {plan.suggested_mem_fraction_static:.3f} or more "
        f"(minimum viable {plan.min_viable_mem_fraction_static:.4f}), or use a smaller draft."
    )


def draft_spec(
    description: DraftDescription,
    kv_pools: tuple[KVSpec, ...],
    fixed_bytes: int,
    target_storages: dict[Any, int],
    shared_weight_bytes: int = 0,
    upstream_reserved_layers: int = 0,
) -> DraftSpec:
    runners = [r.model for r in description.weight_runners]
    return DraftSpec(
        algorithm=description.algorithm,
        kv_pools=kv_pools,
        weight_bytes=sum(storage_bytes(runners, target_storages).values()),
        bytes_per_request=description.bytes_per_request,
        fixed_bytes=fixed_bytes,
        shared_weight_bytes=shared_weight_bytes,
        upstream_reserved_layers=upstream_reserved_layers,
    )


@dataclass(frozen=True)
class SizingReadings:
    pre_model_load_memory_gb: float
    mem_fraction_static: float
    # SGLang's own ``_profile_available_bytes``; None (planner): resident is the weights' sum.
    available_bytes: int | None
    target_kv: KVSpec
    target_weight_bytes: int
    draft: DraftSpec | None
    page_size: int
    context_len: int
    max_total_tokens: int | None
    max_running_requests: int | None
    dp_size: int


def plan_from_readings(
    readings: SizingReadings, *, refuse_too_few: bool = True
) -> tuple[BudgetInputs, PoolPlan]:
    """Refuses a plan below one servable page, before any pool exists; the planner reports
    it instead (``refuse_too_few=False``)."""
    pre_load_free_bytes = int(readings.pre_model_load_memory_gb * GIB)
    f = readings.mem_fraction_static
    measured = None
    if readings.available_bytes is not None:
        measured = int(f * pre_load_free_bytes) - readings.available_bytes
    inputs = BudgetInputs(
        pre_load_free_bytes=pre_load_free_bytes,
        mem_fraction_static=f,
        target_kv=readings.target_kv,
        target_weight_bytes=readings.target_weight_bytes,
        page_size=readings.page_size,
        context_len=readings.context_len,
        draft=readings.draft,
        max_total_tokens=readings.max_total_tokens,
        max_running_requests=readings.max_running_requests,
        dp_size=readings.dp_size,
        measured_resident_bytes=measured,
    )
    plan = plan_pools(inputs)
    if refuse_too_few and plan.tokens < page_ceil(MIN_SERVABLE_TOKENS, inputs.page_size):
        raise SpecInitBudgetError(budget_error_message(inputs, plan))
    return inputs, plan
