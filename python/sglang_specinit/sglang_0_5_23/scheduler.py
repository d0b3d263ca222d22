"""Wraps ``Scheduler.init_memory_pools``: binds the draft's duplicate embed/lm_head first, makes
the draft's description the active sizing, logs the ``SPECINIT_MEMORY`` breakdown (under PP each
stage prices itself). Launches it does not price keep stock, after one log line."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sglang_specinit import rank_reports
from sglang_specinit.budget import GIB
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
from sglang_specinit.runner_readings import (
    draft_unshared_storages,
    rank_free_at_sizing,
)
from sglang_specinit.sglang_0_5_23.draft_pricing import describe_draft
from sglang_specinit.sglang_0_5_23.launch_policy import pricing_blocker

logger = logging.getLogger(__name__)

MODULE = "sglang.srt.managers.scheduler"
BASE_SPEC_WORKER = "sglang.srt.speculative.base_spec_worker"

patch = PatchTable(MODULE)


@patch.around("Scheduler.init_memory_pools", params=())
@patch.calls(
    "BaseSpecWorker.draft_worker", "EagleDraftWorkerBase.draft_runners", module=BASE_SPEC_WORKER
)
@patch.calls("Scheduler.init_target_memory_pool")
@patch.calls("is_deepseek_v4", module="sglang.srt.configs.model_config")
@patch.calls("mambaish_config", module="sglang.srt.configs.hybrid_arch")
def init_memory_pools(original: Any, self: Any) -> None:
    """AROUND hook: early binding + exact draft pricing around SGLang's own pool phase."""
    if self.spec_algorithm.is_none():
        return original(self)
    return run_pool_phase(original, self, pricing_blocker(self), POOL_PHASE, logger)


def stage_sizing(scheduler: Any) -> TargetSizing:
    """This rank's sizing: its draft, or the target pool alone on a PP stage without it."""
    if scheduler.draft_worker is None:
        return TargetSizing(
            draft=DraftDescription(scheduler.spec_algorithm.name), stage_holds_draft=False
        )
    sizing = TargetSizing(draft=describe_draft(scheduler.draft_worker))
    sizing.bind_early = lambda priced: bind_early(scheduler, sizing, priced)
    return sizing


def bind_early(scheduler: Any, sizing: TargetSizing, priced: bool) -> str:
    """Bind the duplicates before profiling (if not ``priced``, only where stock's reserve
    covers the draft); returns the log clause."""
    if not priced:
        scheduler._specinit_early_binding = bind_where_stock_sizes(scheduler)
        return scheduler._specinit_early_binding.note()
    bound = bound_sizing(scheduler, sizing.draft)
    sizing.stock_duplicate_bytes = bound.stock_duplicate_bytes
    sizing.storages_at_profile = draft_unshared_storages(scheduler, sizing.draft)
    scheduler._specinit_rank_free = rank_free_at_sizing(scheduler.tp_worker.model_runner)
    return ""


def bind_where_stock_sizes(scheduler: Any) -> EarlyBinding:
    """Bind a stock-sized launch's draft embed/lm_head first where stock's reserve covers it."""
    from sglang_specinit.sglang_0_5_23.pool_probe import runner_configurator

    runners = list(scheduler.draft_worker.draft_worker.draft_runners)
    target = scheduler.tp_worker.model_runner
    gap = None
    if scheduler.server_args.enable_unified_memory:
        layout = getattr(scheduler.draft_worker, "draft_parallel_layout", None)
        gap = fused_draft_gap(runner_configurator(target, layout))
    if gap is None:
        gap = draft_reserve_gap(target, runners, [runner_configurator(r) for r in runners])
    return bind_under_stock_sizing(scheduler, runners, gap)


def draft_reserve_gap(
    target: Any, drafts: Sequence[Any], draft_configurators: Sequence[Any]
) -> str:
    """Why stock's reserve does not cover the drafts ("" if it does); DCP scales it for DSA only."""
    from sglang.srt.configs.model_config import is_deepseek_dsa

    reserved = target.spec_aux_config.eagle_draft_num_layers
    rows = max((int(kvc.loc_space_scale) for kvc in draft_configurators), default=1)
    return stock_reserve_gap(
        target,
        drafts,
        int(reserved) if reserved is not None and int(reserved) > 0 else 0,
        [int(d.layer_info.num_effective_layers) for d in drafts],
        draft_rows_per_row=rows,
        reserved_rows_per_row=rows if is_deepseek_dsa(target.model_config.hf_config) else 1,
    )


def fused_draft_gap(target_configurator: Any) -> str | None:
    """For a fused draft: "" where stock prices it (full-attention entry only), else why not;
    None where the draft does not fuse."""
    from sglang_specinit.sglang_0_5_23.release_shims import fused_entry_bytes, fused_host_names

    fused = {name: fused_entry_bytes(target_configurator, name) for name in fused_host_names()}
    hosts = sorted(name for name, entry in fused.items() if entry is not None)
    if not hosts:
        return None
    if hosts != ["full"]:
        return (
            f"the draft fuses into the target's {', '.join(hosts)} entries; stock's unified "
            "envelope prices only the full-attention one with the draft's rows"
        )
    return ""


def log_memory_breakdown(
    scheduler: Any, sizing: TargetSizing, rank_free_bytes: int | None = None
) -> None:
    """Log this rank's breakdown (``plan --json``'s quantities measured here, with its place
    and tightness) and, with ``SGLANG_SPECINIT_REPORT_DIR``, write its file."""
    from sglang_specinit.sglang_0_5_23.release_shims import (
        multimodal_reservation_gb,
        scheduler_ranks,
    )

    # Read again after the early binding (bind_early).
    rank_free_bytes = getattr(scheduler, "_specinit_rank_free", rank_free_bytes)
    draft_runners = sizing.draft.pool_runners + [r for r, _ in sizing.draft.fixed_pools]
    parallel = scheduler_ranks(scheduler)
    breakdown = sizing_breakdown(scheduler, sizing, draft_runners, parallel.tp_size)
    # Under attention DP the DP rank is inside TP.
    attn_dp = bool(parallel.attn_dp_enabled)
    replica = 0 if attn_dp else int(parallel.dp_rank or 0)
    breakdown.update(
        rank_reports.rank_fields(
            replica=replica,
            pp_rank=int(parallel.pp_rank),
            tp_rank=int(parallel.tp_rank),
            dp_rank=int(parallel.attn_dp_rank) if attn_dp else replica,
            attn_tp_rank=int(parallel.attn_tp_rank),
            pp_size=int(parallel.pp_size),
            tp_size=int(parallel.tp_size),
            dp_size=int(parallel.num_dp_ranks),
        )
    )
    if breakdown["pp_size"] > 1:  # what this stage priced, and whether it set SGLang's minimum
        assert sizing.plan is not None
        own = sizing.stage_tokens if sizing.stage_tokens is not None else sizing.plan.tokens
        breakdown.update(
            pp_stage_holds_draft=sizing.stage_holds_draft,
            pp_stage_priced="target + draft pools" if sizing.stage_holds_draft else "target pool",
            pp_stage_tokens=own,
            pp_tightest_stage=own == sizing.plan.tokens,
        )
    # SGLang's all-rank minimum free at sizing, from the inputs; None for a mamba target.
    runner, inputs = scheduler.tp_worker.model_runner, sizing.inputs
    min_free = None
    if getattr(runner, "mambaish_config", None) is None:
        reservation_gb = multimodal_reservation_gb() if runner.model_config.is_multimodal else 0.0
        min_free = (
            inputs.pre_load_free_bytes - inputs.measured_resident_bytes + int(reservation_gb * GIB)
        )
    breakdown.update(rank_reports.tightness_fields(rank_free_bytes, min_free))
    breakdown.update(rank_reports.cuda_fields_after_pools(scheduler.server_args.device))
    scheduler._specinit_breakdown = breakdown
    headline = f"KV pools on sglang {breakdown['sglang_version']}"
    if "pp_stage_priced" in breakdown:
        headline += (
            f", PP stage {breakdown['pp_rank']} of {breakdown['pp_size']} priced as its "
            f"{breakdown['pp_stage_priced']}: {breakdown['pp_stage_tokens']} tokens on its own"
            f"{' (the tightest stage)' if breakdown['pp_tightest_stage'] else ''}, "
            f"{breakdown['tokens']} served (SGLang's minimum over stages)"
        )
    rank_reports.log_breakdown(logger, breakdown, headline)


POOL_PHASE = PoolPhase(
    bind_where_stock_sizes=bind_where_stock_sizes,
    sizing_for=stage_sizing,
    log_breakdown=log_memory_breakdown,
)

HOOKS, NEW_METHODS, REQUIRES = patch.tables()
