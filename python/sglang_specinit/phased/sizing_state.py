"""The thread-local hand-over from the scheduler hook to the sizing hook one frame deeper, and
the record the memory breakdown is written from (no SGLang import)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sglang_specinit.budget import BudgetInputs, KVSpec, PoolPlan
from sglang_specinit.live_sizing import DraftDescription, SizingReadings, draft_spec, storage_bytes

# (target pool, draft pools, draft fixed-pool bytes), each priced by building it.
Prices = tuple[KVSpec, tuple[KVSpec, ...], int]

_local = threading.local()


@dataclass
class TargetSizing:
    draft: DraftDescription
    duplicate_bytes_at_profile: int = 0
    # Measured before the early binding.
    stock_duplicate_bytes: int = 0
    inputs: BudgetInputs | None = None
    plan: PoolPlan | None = None
    upstream_reserved_layers: int = 0
    draft_pools: tuple[KVSpec, ...] = field(default_factory=tuple)
    pricing_seconds: float = 0.0
    # False on a pipeline stage without the draft: its target pool is priced alone.
    stage_holds_draft: bool = True
    # What this rank's pricing affords where SGLang's MIN sync over stages served fewer.
    stage_tokens: int | None = None
    # Binding left to the sizing hook (True: bind; False: only where stock's reserve covers it).
    bind_early: Callable[[bool], str] | None = None
    # Recorded where the binding runs inside SGLang's pool phase; None: as the phase starts.
    storages_at_profile: dict[Any, int] | None = None


def active_sizing() -> TargetSizing | None:
    return getattr(_local, "sizing", None)


@contextlib.contextmanager
def sizing_active(sizing: TargetSizing) -> Iterator[None]:
    previous = active_sizing()
    _local.sizing = sizing
    try:
        yield
    finally:
        _local.sizing = previous


def priced_readings(
    sizing: TargetSizing,
    prices: Prices,
    target_model: Any,
    *,
    reserved_draft_layers: Any,
    pre_model_load_memory: float,
    available_bytes: int,
    mem_fraction_static: float,
    page_size: int,
    context_len: int,
    max_total_tokens: int | None,
    max_running_requests: int | None,
    dp_size: int,
) -> SizingReadings:
    """Readings for one target pool at ``prices``; records draft pools and reserve on ``sizing``."""
    target_storages = storage_bytes([target_model])
    target_kv, sizing.draft_pools, fixed_bytes = prices
    d = reserved_draft_layers
    sizing.upstream_reserved_layers = int(d) if d is not None and int(d) > 0 else 0
    draft = None
    if sizing.stage_holds_draft:
        draft = draft_spec(
            sizing.draft,
            sizing.draft_pools,
            fixed_bytes,
            target_storages,
            shared_weight_bytes=sizing.stock_duplicate_bytes,
            upstream_reserved_layers=sizing.upstream_reserved_layers,
        )
    return SizingReadings(
        pre_model_load_memory_gb=pre_model_load_memory,
        mem_fraction_static=mem_fraction_static,
        available_bytes=available_bytes,
        target_kv=target_kv,
        target_weight_bytes=sum(target_storages.values()),
        draft=draft,
        page_size=page_size,
        context_len=context_len,
        max_total_tokens=max_total_tokens,
        max_running_requests=max_running_requests,
        dp_size=dp_size,
    )
