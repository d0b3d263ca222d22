"""The scheduler's pool phase around SGLang's own, as every adapter with a phased init runs it
(no SGLang import; each adapter's ``Scheduler.init_memory_pools`` hook calls it).

SGLang's ``init_memory_pools`` sizes the target pool, then allocates the draft's on the same
config. Around it:

* a launch whose pricing is not the package's (``blocker``: a :class:`StepAside`) keeps
  SGLang's method unchanged after one log line naming why; where the draft is a known worker
  the adapter's stock binding (``PoolPhase.bind_where_stock_sizes``) first frees the draft's
  duplicate embed/lm_head where stock's reserve covers the draft, and the line says what that
  bound and freed;
* a priced launch describes its draft and binds the duplicates early
  (``PoolPhase.sizing_for``: :func:`bound_sizing` for a rank holding the draft; 0.5.23 leaves
  it to its sizing hook, ``TargetSizing.bind_early``, until pricing is certain), makes that
  the active sizing for the configurator hook one frame deeper (:mod:`.sizing_state`), runs
  SGLang's method and logs the memory breakdown (``PoolPhase.log_breakdown``) with the rank's
  own free memory at sizing (read before SGLang's sizing, no collective added).
"""

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
    rank_free_at_sizing,
)


@dataclass(frozen=True)
class PoolPhase:
    """An adapter's parts of the pool phase, each reading its release's objects."""

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
    """SGLang's ``init_memory_pools`` (``original``) with the draft priced, or stock's with one
    log line where ``blocker`` says why not (see the module docstring)."""
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
    # What the draft holds apart from the target at profiling: as it is now, unless a binding
    # inside SGLang's pool phase recorded it when it ran (TargetSizing.storages_at_profile).
    at_start = draft_unshared_storages(scheduler, sizing.draft)
    own_free = rank_free_at_sizing(scheduler.tp_worker.model_runner)
    with sizing_active(sizing):
        original(scheduler)
    if sizing.plan is None:
        return  # the sizing hook stepped aside (and said why)
    at_profile = at_start if sizing.storages_at_profile is None else sizing.storages_at_profile
    sizing.duplicate_bytes_at_profile = duplicates_resident_at_profile(
        at_profile, draft_unshared_storages(scheduler, sizing.draft)
    )
    scheduler._specinit_sizing = sizing
    phase.log_breakdown(scheduler, sizing, own_free)


def bound_sizing(scheduler: Any, description: DraftDescription) -> TargetSizing:
    """The sizing of a rank holding the draft described: its duplicate embed/lm_head bound to
    the target's now (nothing duplicated is resident when the target pool is profiled), and
    what stock would have had resident there (the bytes the binding freed)."""
    before = draft_duplicate_bytes(scheduler, description)
    bind_shared_weights_early(scheduler.draft_worker)
    after = draft_duplicate_bytes(scheduler, description)
    return TargetSizing(draft=description, stock_duplicate_bytes=max(before - after, 0))


def duplicates_resident_at_profile(at_profile: dict[Any, int], after_pools: dict[Any, int]) -> int:
    """Bytes of the draft storages held apart from the target while the target pool was
    profiled that SGLang's own binding, later in its pool phase, replaced by the target's:
    the duplicates resident at profiling (0 once :func:`bound_sizing` bound them first)."""
    return sum(size for key, size in at_profile.items() if key not in after_pools)
