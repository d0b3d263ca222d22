"""The scheduler's pool phase with the draft priced exactly (sglang 0.5.14 / 0.5.15).

Wraps ``Scheduler.init_memory_pools`` (``managers.scheduler``; ``scheduler.py:836`` in 0.5.14,
``:841`` in 0.5.15).

These releases' ``init_memory_pools`` sizes the target pool (``init_target_memory_pool``),
then allocates the draft's pools on the same config, binding the draft's embed/lm_head inside
the draft's ``alloc_memory_pool``. Around it this hook, for a launch whose draft pricing is
this package's to own (:mod:`.launch_policy`), does what the 0.5.23 adapter's does:

1. binds the draft's duplicate embed/lm_head to the target's first (:mod:`.eagle`), so that
   memory is free before the target pool is profiled;
2. names the runners that will own draft pools (those ``TpModelWorker.alloc_memory_pool``
   allocates one pool for, ``managers/tp_worker.py:316-333`` in 0.5.14) and makes that the
   active sizing for the target's ``_resolve_memory_pool_config`` (:mod:`.runtime_budget`)
   while SGLang's own ``init_memory_pools`` runs;
3. logs the memory breakdown (the ``SPECINIT_MEMORY`` line, same keys as the 0.5.23 adapter's)
   and, with ``SGLANG_SPECINIT_REPORT_DIR`` set, writes it to one file per scheduler.

Launches it does not price run SGLang's method unchanged, after one log line naming why; where
the draft is a known worker and the release's own reserve covers it, the draft's embed/lm_head
are bound first there too and the line says what that bound and freed.
"""

from __future__ import annotations

import logging
from typing import Any

from sglang_specinit import rank_reports
from sglang_specinit.live_sizing import DraftDescription
from sglang_specinit.patch_table import PatchTable
from sglang_specinit.phased.pool_phase import PoolPhase, bound_sizing, run_pool_phase
from sglang_specinit.phased.sizing_state import TargetSizing
from sglang_specinit.phased.stock_binding import (
    EarlyBinding,
    bind_under_stock_sizing,
    stock_reserve_gap,
)
from sglang_specinit.runner_readings import (
    kv_pool_allocated_bytes,
)
from sglang_specinit.sglang_0_5_14.launch_policy import pricing_blocker

logger = logging.getLogger(__name__)

MODULE = "sglang.srt.managers.scheduler"
BASE_SPEC_WORKER = "sglang.srt.speculative.base_spec_worker"

patch = PatchTable(MODULE)


def describe_draft(scheduler: Any) -> DraftDescription:
    """The runners of an EAGLE-family / STANDALONE draft: each holds weights and one pool.

    The ones ``TpModelWorker.alloc_memory_pool`` allocates for: its ``model_runner``, then
    ``model_runner_list[1:]`` (filled for multi-layer EAGLE only; ``tp_worker.py:329-333`` and
    ``:398-401`` in 0.5.14)."""
    tp_worker = scheduler.draft_worker.draft_worker.draft_worker
    runners = [tp_worker.model_runner, *tp_worker.model_runner_list[1:]]
    return DraftDescription(
        scheduler.spec_algorithm.name, weight_runners=runners, pool_runners=runners
    )


@patch.around("Scheduler.init_memory_pools", params=())
# The draft's runners are read through the spec worker's draft worker (describe_draft).
@patch.calls("BaseSpecWorker.draft_worker", module=BASE_SPEC_WORKER)
# SGLang's own pool phase (``original``) sizes the target pool through this.
@patch.calls("Scheduler.init_target_memory_pool")
def init_memory_pools(original: Any, self: Any) -> None:
    """AROUND hook: early binding + exact draft pricing around SGLang's own pool phase."""
    if self.spec_algorithm.is_none():
        return original(self)
    return run_pool_phase(original, self, pricing_blocker(self), POOL_PHASE, logger)


def bind_where_stock_sizes(scheduler: Any) -> EarlyBinding:
    """Bind a stock-sized launch's draft embed/lm_head before the target pool is profiled,
    where the release's reserve covers the draft (:mod:`sglang_specinit.phased.stock_binding`).

    Stock's reserve is the target runner's ``eagle_draft_num_layers`` layers of the target's
    geometry (``cell * (1 + d / n)``, ``model_executor/pool_configurator.py:131-145`` in
    0.5.14); each draft runner allocates ``num_effective_layers`` layers at the target's
    token count (``managers/tp_worker.py:316-333``)."""
    runners = describe_draft(scheduler).weight_runners
    target = scheduler.tp_worker.model_runner
    reserved = getattr(target, "eagle_draft_num_layers", None)
    gap = stock_reserve_gap(
        target,
        runners,
        int(reserved) if reserved is not None and int(reserved) > 0 else 0,
        [int(r.num_effective_layers) for r in runners],
    )
    return bind_under_stock_sizing(scheduler, runners, gap)


def all_rank_min_free(scheduler: Any, sizing: TargetSizing) -> int | None:
    """SGLang's all-rank minimum of free memory at sizing, from the budget inputs:
    ``_profile_available_bytes`` returns ``min_free - (1 - f) * pre_load_free``
    (``model_runner_kv_cache_mixin.py:85-120`` in 0.5.14), and the inputs'
    ``measured_resident_bytes`` is ``f * pre_load_free`` minus that. None for a mamba-state
    target, whose reading SGLang reshapes further (``handle_max_mamba_cache``)."""
    inputs = sizing.inputs
    runner = scheduler.tp_worker.model_runner
    if inputs is None or inputs.measured_resident_bytes is None:
        return None
    if getattr(runner, "mambaish_config", None) is not None:
        return None
    return inputs.pre_load_free_bytes - inputs.measured_resident_bytes


def memory_breakdown(
    scheduler: Any, sizing: TargetSizing, rank_free_bytes: int | None = None
) -> dict[str, Any]:
    """The same quantities ``sglang-specinit plan --json`` prints, measured on this rank."""
    from sglang_specinit.compat import installed_sglang_version
    from sglang_specinit.rank_reports import tightness_fields
    from sglang_specinit.report import plan_to_dict

    assert sizing.plan is not None and sizing.inputs is not None
    breakdown = plan_to_dict(sizing.plan, sizing.inputs, tp_size=scheduler.ps.tp_size)
    breakdown["sglang_version"] = installed_sglang_version()
    breakdown["allocated_target_kv_pool_bytes"] = kv_pool_allocated_bytes(
        scheduler.tp_worker.model_runner
    )
    breakdown["allocated_draft_kv_pool_bytes"] = sum(
        kv_pool_allocated_bytes(r) for r in sizing.draft.pool_runners
    )
    breakdown["upstream_reserved_layers"] = sizing.upstream_reserved_layers
    breakdown["stock_duplicate_bytes_at_profile"] = sizing.stock_duplicate_bytes
    breakdown["duplicate_bytes_at_profile"] = sizing.duplicate_bytes_at_profile
    breakdown["pricing_seconds"] = round(sizing.pricing_seconds, 4)
    breakdown.update(
        rank_reports.parallel_state_rank_fields(
            scheduler.ps, scheduler.server_args.enable_dp_attention
        )
    )
    breakdown.update(tightness_fields(rank_free_bytes, all_rank_min_free(scheduler, sizing)))
    breakdown.update(rank_reports.cuda_fields_after_pools(scheduler.server_args.device))
    return breakdown


def log_memory_breakdown(
    scheduler: Any, sizing: TargetSizing, rank_free_bytes: int | None = None
) -> None:
    """Log this rank's breakdown, its tightness line and the ``SPECINIT_MEMORY`` JSON line;
    write its file when ``SGLANG_SPECINIT_REPORT_DIR`` is set (:func:`~sglang_specinit.
    rank_reports.log_breakdown`, with this module's logger)."""
    breakdown = memory_breakdown(scheduler, sizing, rank_free_bytes)
    scheduler._specinit_breakdown = breakdown
    rank_reports.log_breakdown(
        logger, breakdown, f"KV pools on sglang {breakdown['sglang_version']}"
    )


POOL_PHASE = PoolPhase(
    bind_where_stock_sizes=bind_where_stock_sizes,
    sizing_for=lambda scheduler: bound_sizing(scheduler, describe_draft(scheduler)),
    log_breakdown=log_memory_breakdown,
)

HOOKS, NEW_METHODS, REQUIRES = patch.tables()
