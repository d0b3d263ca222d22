"""What a scheduler hook hands the configurator hook for one target pool (no SGLang import).

Both phased-init adapters (the ModelRunner-sized generation and the configurator-sized one)
describe the draft in the scheduler's pool phase and size the target's pool inside SGLang's own
sizing call, one frame deeper; this is the thread-local hand-over between the two hooks and the
record the memory breakdown is written from.
"""

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
    """What the scheduler hook hands to the sizing hook for one target pool."""

    draft: DraftDescription
    # Draft weight bytes resident while the target pool was profiled that duplicate the
    # target's: the storages SGLang's later binding replaced (set after its pool phase).
    duplicate_bytes_at_profile: int = 0
    # What stock would have had resident twice (measured before the early binding).
    stock_duplicate_bytes: int = 0
    inputs: BudgetInputs | None = None
    plan: PoolPlan | None = None
    upstream_reserved_layers: int = 0
    draft_pools: tuple[KVSpec, ...] = field(default_factory=tuple)
    # Wall seconds the pricing took (building every pool tiny): the plugin's own init cost.
    pricing_seconds: float = 0.0
    # False on a pipeline stage without a draft worker (the draft lives on another stage):
    # its target pool is priced alone.
    stage_holds_draft: bool = True
    # The tokens this rank's own pricing affords, where SGLang's sync across pipeline stages
    # (a MIN all-reduce) then served fewer; None where the two agree.
    stage_tokens: int | None = None
    # The draft's early binding, left to the sizing hook (0.5.23) until it knows whether it
    # prices this pool: called once with True (pricing is certain: bind) or False (stock's
    # sizing stays: bind only where stock's reserve covers the draft); returns the log clause.
    bind_early: Callable[[bool], str] | None = None
    # The draft's storages not shared with the target when the pool is profiled, recorded
    # where the binding runs inside SGLang's pool phase; None: as the pool phase starts.
    storages_at_profile: dict[Any, int] | None = None


def active_sizing() -> TargetSizing | None:
    """The sizing the scheduler hook made active in this thread, if any."""
    return getattr(_local, "sizing", None)


@contextlib.contextmanager
def sizing_active(sizing: TargetSizing) -> Iterator[None]:
    """``sizing`` is :func:`active_sizing` for the duration (nested calls restore the outer)."""
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
    """The shared sizing path's readings for one target pool priced at ``prices``: the target's
    weights are the storages ``target_model`` holds, the draft's what its runners hold apart
    from them (none on a pipeline stage without the draft: its target pool alone). Records the
    draft pools and stock's reserved draft layers (``reserved_draft_layers``, for the report
    only) on ``sizing``. Each adapter passes the rest as its release reads them."""
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
