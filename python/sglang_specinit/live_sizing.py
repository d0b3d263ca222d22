"""What every release adapter's runtime sizing shares (no SGLang import).

* :class:`DraftDescription` — a live draft worker's allocations by kind (the adapters fill it
  from their own worker classes);
* :func:`storage_bytes` — weight bytes counted by storage, so a tensor the draft shares with
  the target (a bound embed/lm_head) is counted once. These figures feed the memory report
  and the duplicate-weight accounting, never the token count (SGLang's own free-memory reading
  does), so they must never stop a launch: a wrapper tensor subclass without a readable
  storage (torchao quantized weights, DTensor) is counted by its own size;
* :func:`draft_spec` and :func:`plan_from_readings` — the one sizing path every adapter
  and the offline planner run: what was read from SGLang's objects -> ``budget.plan_pools``
  -> the "too few tokens" check; the adapter only reads SGLang's objects and hands the token
  count back;
* :class:`SpecInitBudgetError` and its message, naming the fraction to pass.
"""

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
    """What a live draft worker will put on the device, by kind of allocation."""

    algorithm: str = ""
    # Runners whose models hold the draft's weights.
    weight_runners: list[Any] = field(default_factory=list)
    # Runners that get a KV pool of the target's token count.
    pool_runners: list[Any] = field(default_factory=list)
    # (runner, tokens) for a pool of fixed size (frozen-KV MTP's stand-in pool).
    fixed_pools: list[tuple[Any, int]] = field(default_factory=list)
    # Bytes per req-to-token row of per-request draft buffers.
    bytes_per_request: int = 0


def _storage_key_and_bytes(tensor: Any) -> tuple[Any, int]:
    """(identity, bytes) of a tensor's storage; tensors sharing a storage share the identity."""
    try:
        storage = tensor.untyped_storage()
        return storage.data_ptr(), int(storage.nbytes())
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):
        return ("tensor", id(tensor)), int(tensor.numel() * tensor.element_size())


def storage_bytes(modules: Iterable[Any], exclude: Iterable[Any] = ()) -> dict[Any, int]:
    """storage identity -> bytes of every parameter and buffer of ``modules``, except the
    storages in ``exclude`` (identities from an earlier call)."""
    excluded = set(exclude)
    storages: dict[Any, int] = {}
    for module in modules:
        for tensor in [*module.parameters(), *module.buffers()]:
            key, size = _storage_key_and_bytes(tensor)
            if key not in excluded:
                storages[key] = size
    return storages


class SpecInitBudgetError(ValueError):
    """The weights leave no room for the KV cache under the requested --mem-fraction-static."""


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
    """The budget model's draft, from a live draft's description and its priced pools; its
    weights are the storages its runners hold that the target does not."""
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
    """What an adapter read from SGLang's live objects when the target pool is sized."""

    pre_model_load_memory_gb: float  # SGLang's free-memory reading before loading (GiB)
    mem_fraction_static: float
    # SGLang's own KV budget now (``_profile_available_bytes``: f x free before loading minus
    # everything that left free memory since: weights, multimodal / mamba reservations).
    # None (the offline planner without a measured resident figure): nothing was read, the
    # resident bytes are the weights'.
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
    """Readings -> the budget model's inputs -> ``budget.plan_pools``, refusing a plan that
    cannot serve one page (before any pool exists) with the fraction to pass.

    ``refuse_too_few=False`` is the offline planner's: it reports such a plan (its minimum
    viable fraction included) instead of refusing it.
    """
    pre_load_free_bytes = int(readings.pre_model_load_memory_gb * GIB)
    f = readings.mem_fraction_static
    measured = None
    if readings.available_bytes is not None:
        # Everything SGLang saw leave free memory since its pre-load reading, exactly as its
        # own budget charges it.
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
