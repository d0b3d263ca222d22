"""The scheduler's pool phase around SGLang's ``init_memory_pools`` (phased releases): step aside
after one log line, or bind early, size (:mod:`.sizing_state`) and log the breakdown."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sglang_specinit.compat import installed_sglang_version
from sglang_specinit.live_sizing import DraftDescription
from sglang_specinit.phased.early_binding import bind_shared_weights_early
from sglang_specinit.phased.sizing_state import TargetSizing, sizing_active
from sglang_specinit.phased.step_aside import StepAside
from sglang_specinit.phased.stock_binding import EarlyBinding
from sglang_specinit.runner_readings import (
    draft_duplicate_bytes,
    draft_unshared_storages,
    kv_pool_allocated_bytes,
    rank_free_at_sizing,
)


@dataclass(frozen=True)
class PoolPhase:
    bind_where_stock_sizes: Callable[[Any], EarlyBinding]
    sizing_for: Callable[[Any], TargetSizing]
    log_breakdown: Callable[[Any, TargetSizing, int | None], None]


def run_pool_phase(
    original: Callable[[Any], None],
    scheduler: Any,
    blocker: StepAside | None,
    phase: PoolPhase,
    logger: logging.Logger,
) -> None:
    if blocker is not None:
        note = ""
        if blocker.binds:
            scheduler._specinit_early_binding = phase.bind_where_stock_sizes(scheduler)
            note = "; " + scheduler._specinit_early_binding.note()
        log = logger.warning if blocker.warn else logger.info
        log(
            "[specinit] stock sglang %s KV sizing: %s%s",
            installed_sglang_version() or "?",
            blocker.reason,
            note,
        )
        original(scheduler)
        return
    sizing = phase.sizing_for(scheduler)
    # A binding inside SGLang's pool phase records its own (TargetSizing.storages_at_profile).
    at_start = draft_unshared_storages(scheduler, sizing.draft)
    own_free = rank_free_at_sizing(scheduler.tp_worker.model_runner)
    with sizing_active(sizing):
        original(scheduler)
    if sizing.plan is None:
        return  # the sizing hook stepped aside, and said why
    at_profile = at_start if sizing.storages_at_profile is None else sizing.storages_at_profile
    # Duplicates resident at profiling: storages SGLang's later binding replaced.
    after_pools = draft_unshared_storages(scheduler, sizing.draft)
    sizing.duplicate_bytes_at_profile = sum(
        size for key, size in at_profile.items() if key not in after_pools
    )
    scheduler._specinit_sizing = sizing
    phase.log_breakdown(scheduler, sizing, own_free)


def bound_sizing(scheduler: Any, description: DraftDescription) -> TargetSizing:
    """Binds the draft's duplicate embed/lm_head now, recording what stock would have held."""
    before = draft_duplicate_bytes(scheduler, description)
    bind_shared_weights_early(scheduler.draft_worker)
    after = draft_duplicate_bytes(scheduler, description)
    return TargetSizing(draft=description, stock_duplicate_bytes=max(before - after, 0))


def sizing_breakdown(
    scheduler: Any, sizing: TargetSizing, draft_runners: list[Any], tp_size: int
) -> dict[str, Any]:
    """``plan --json``'s quantities as this rank sized and allocated its pools."""
    from sglang_specinit.report import plan_to_dict

    assert sizing.plan is not None and sizing.inputs is not None
    breakdown = plan_to_dict(sizing.plan, sizing.inputs, tp_size=tp_size)
    breakdown["sglang_version"] = installed_sglang_version()
    breakdown["allocated_target_kv_pool_bytes"] = kv_pool_allocated_bytes(
        scheduler.tp_worker.model_runner
    )
    breakdown["allocated_draft_kv_pool_bytes"] = sum(
        kv_pool_allocated_bytes(r) for r in draft_runners
    )
    breakdown["upstream_reserved_layers"] = sizing.upstream_reserved_layers
    breakdown["stock_duplicate_bytes_at_profile"] = sizing.stock_duplicate_bytes
    breakdown["duplicate_bytes_at_profile"] = sizing.duplicate_bytes_at_profile
    breakdown["pricing_seconds"] = round(sizing.pricing_seconds, 4)
    return breakdown
