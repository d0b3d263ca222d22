"""The scheduler's pool phase with the draft priced exactly (0.5.14 / 0.5.15): around
``Scheduler.init_memory_pools`` bind the duplicates before profiling, size the target, log the
``SPECINIT_MEMORY`` breakdown; other launches keep stock after one log line."""

from __future__ import annotations

import logging
from typing import Any

from sglang_specinit import rank_reports
from sglang_specinit.live_sizing import DraftDescription
from sglang_specinit.patch_table import PatchTable
from sglang_specinit.phased.pool_phase import (
    PoolPhase,
    bound_sizing,
    run_pool_phase,
    sizing_breakdown,
)
from sglang_specinit.phased.sizing_state import TargetSizing
from sglang_specinit.phased.stock_binding import (
    EarlyBinding,
    bind_under_stock_sizing,
    stock_reserve_gap,
)
from sglang_specinit.sglang_0_5_14.launch_policy import pricing_blocker

logger = logging.getLogger(__name__)

MODULE = "sglang.srt.managers.scheduler"
BASE_SPEC_WORKER = "sglang.srt.speculative.base_spec_worker"

patch = PatchTable(MODULE)


def describe_draft(scheduler: Any) -> DraftDescription:
    """The runners ``TpModelWorker.alloc_memory_pool`` gives one pool each."""
    tp_worker = scheduler.draft_worker.draft_worker.draft_worker
    runners = [tp_worker.model_runner, *tp_worker.model_runner_list[1:]]
    return DraftDescription(
        scheduler.spec_algorithm.name, weight_runners=runners, pool_runners=runners
    )


@patch.around("Scheduler.init_memory_pools", params=())
@patch.calls("BaseSpecWorker.draft_worker", module=BASE_SPEC_WORKER)
@patch.calls("Scheduler.init_target_memory_pool")
def init_memory_pools(original: Any, self: Any) -> None:
    if self.spec_algorithm.is_none():
        return original(self)
    return run_pool_phase(original, self, pricing_blocker(self), POOL_PHASE, logger)


def bind_where_stock_sizes(scheduler: Any) -> EarlyBinding:
    """Stock reserves ``eagle_draft_num_layers`` target-geometry layers; each draft runner
    allocates ``num_effective_layers`` at the target's token count."""
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


def log_memory_breakdown(
    scheduler: Any, sizing: TargetSizing, rank_free_bytes: int | None = None
) -> None:
    breakdown = sizing_breakdown(scheduler, sizing, sizing.draft.pool_runners, scheduler.ps.tp_size)
    breakdown.update(
        rank_reports.parallel_state_rank_fields(
            scheduler.ps, scheduler.server_args.enable_dp_attention
        )
    )
    # SGLang's all-rank minimum free at sizing, from the inputs; None for a mamba target.
    inputs, min_free = sizing.inputs, None
    if inputs is not None and inputs.measured_resident_bytes is not None:
        if getattr(scheduler.tp_worker.model_runner, "mambaish_config", None) is None:
            min_free = inputs.pre_load_free_bytes - inputs.measured_resident_bytes
    breakdown.update(rank_reports.tightness_fields(rank_free_bytes, min_free))
    breakdown.update(rank_reports.cuda_fields_after_pools(scheduler.server_args.device))
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
