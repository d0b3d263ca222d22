"""The scheduler's pool phase with the draft priced exactly (sglang 0.5.23).

Wraps ``Scheduler.init_memory_pools`` (``managers.scheduler``).

0.5.23's ``init_memory_pools`` sizes the target pool (``init_target_memory_pool``), then
allocates the draft's pools on the same config, binding the draft's embed/lm_head inside the
draft's ``alloc_memory_pool``. Around it this hook, for a launch whose draft pricing is this
package's to own (:mod:`.launch_policy`):

1. binds the draft's duplicate embed/lm_head to the target's first (:mod:`.eagle`), so that
   memory is free before the target pool is profiled;
2. describes what the draft will allocate (:mod:`.draft_pricing`) and makes it the active
   sizing for the target's configurator (:mod:`.runtime_budget`) while SGLang's own
   ``init_memory_pools`` runs;
3. logs the memory breakdown (the ``SPECINIT_MEMORY`` line, same keys as ``plan --json``)
   and, with ``SGLANG_SPECINIT_REPORT_DIR`` set, writes it to one file per scheduler
   (``memory-rank<i>-pp<p>-tp<t>-dp<d>.json``, :mod:`sglang_specinit.rank_reports`), with this
   rank's own free memory at sizing next to SGLang's all-rank minimum and whether it is the
   tightest rank (no collective added: ``runner_readings.rank_free_at_sizing``).

Under pipeline parallelism each stage prices itself (:func:`stage_sizing`): the stage holding
the draft as above, a stage without one (``SGLANG_ENABLE_PP_SPEC``) as its target pool alone;
SGLang's MIN sync over stages then sets the launch's count, and each stage's breakdown says
what it priced and what it alone could afford (:func:`stage_fields`).

Launches it does not price run SGLang's method unchanged, after one log line naming why; where
the draft is a known worker and 0.5.23's own reserve covers it, the draft's embed/lm_head are
bound first there too and the line says what that bound and freed (:func:`bind_where_stock_sizes`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sglang_specinit import rank_reports
from sglang_specinit.budget import GIB, BudgetInputs
from sglang_specinit.compat import installed_sglang_version
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
    draft_unshared_storages,
    kv_pool_allocated_bytes,
    rank_free_at_sizing,
)
from sglang_specinit.sglang_0_5_23.draft_pricing import describe_draft
from sglang_specinit.sglang_0_5_23.launch_policy import pricing_blocker

logger = logging.getLogger(__name__)

MODULE = "sglang.srt.managers.scheduler"
BASE_SPEC_WORKER = "sglang.srt.speculative.base_spec_worker"

patch = PatchTable(MODULE)


@patch.around("Scheduler.init_memory_pools", params=())
# The draft's runners are read through the spec worker (draft_pricing, eagle).
@patch.calls(
    "BaseSpecWorker.draft_worker", "EagleDraftWorkerBase.draft_runners", module=BASE_SPEC_WORKER
)
# SGLang's own pool phase (``original``) sizes the target pool through this.
@patch.calls("Scheduler.init_target_memory_pool")
# The memory breakdown's all-rank minimum (all_rank_min_free_at_sizing) reads SGLang's multimodal
# reservation through release_shims (its rows there: 0.5.17 reserves none).
# Which launches are priced (launch_policy) and a hybrid target's stash rows (draft_pricing).
@patch.calls("is_deepseek_v4", module="sglang.srt.configs.model_config")
@patch.calls("mambaish_config", module="sglang.srt.configs.hybrid_arch")
def init_memory_pools(original: Any, self: Any) -> None:
    """AROUND hook: early binding + exact draft pricing around SGLang's own pool phase."""
    if self.spec_algorithm.is_none():
        return original(self)
    return run_pool_phase(original, self, pricing_blocker(self), POOL_PHASE, logger)


def stage_sizing(scheduler: Any) -> TargetSizing:
    """What this rank's target pool is priced with: its draft as described, the duplicate
    embed/lm_head bound by the sizing hook once it knows whether it prices the pool
    (:func:`bind_early`); on a pipeline stage without a draft worker
    (``launch_policy.stage_without_draft``) the target pool alone, nothing to bind."""
    if scheduler.draft_worker is None:
        return TargetSizing(
            draft=DraftDescription(scheduler.spec_algorithm.name), stage_holds_draft=False
        )
    sizing = TargetSizing(draft=describe_draft(scheduler.draft_worker))
    sizing.bind_early = lambda priced: bind_early(scheduler, sizing, priced)
    return sizing


def bind_early(scheduler: Any, sizing: TargetSizing, priced: bool) -> str:
    """The draft's duplicate embed/lm_head bound before the target pool is profiled: where the
    pool is priced (``priced``), always (``pool_phase.bound_sizing``, its byte counts kept on
    ``sizing``); where the sizing hook keeps stock's sizing after all, only where stock's
    reserve covers the draft (:func:`bind_where_stock_sizes`). Returns the log clause ("" when
    priced). The rank's own free memory is read again after binding, for the breakdown."""
    if not priced:
        scheduler._specinit_early_binding = bind_where_stock_sizes(scheduler)
        return scheduler._specinit_early_binding.note()
    bound = bound_sizing(scheduler, sizing.draft)
    sizing.stock_duplicate_bytes = bound.stock_duplicate_bytes
    # The target pool is profiled next: what the draft still holds apart is resident then.
    sizing.storages_at_profile = draft_unshared_storages(scheduler, sizing.draft)
    scheduler._specinit_rank_free = rank_free_at_sizing(scheduler.tp_worker.model_runner)
    return ""


def bind_where_stock_sizes(scheduler: Any) -> EarlyBinding:
    """Bind a stock-sized launch's draft embed/lm_head before the target pool is profiled,
    where 0.5.23's reserve covers the draft (:mod:`sglang_specinit.phased.stock_binding`).

    Stock's reserve is ``spec_aux_config.eagle_draft_num_layers`` layers of the target's
    geometry (``model_executor/pool_configurator.py:259-305``; HybridSWA ``:730-760``; DSv4
    ``:1250-1257`` one layer); each draft runner allocates ``layer_info.num_effective_layers``
    layers at the target's token count (``mem_cache/kv_cache_configurator.py:528-544``).
    """
    from sglang_specinit.sglang_0_5_23.pool_probe import draft_configurator, runner_configurator

    runners = list(scheduler.draft_worker.draft_worker.draft_runners)
    target = scheduler.tp_worker.model_runner
    gap = None
    if scheduler.server_args.enable_unified_memory:
        layout = getattr(scheduler.draft_worker, "draft_parallel_layout", None)
        gap = fused_draft_gap(runner_configurator(target, layout))
    if gap is None:
        gap = draft_reserve_gap(target, runners, [draft_configurator(r) for r in runners])
    return bind_under_stock_sizing(scheduler, runners, gap)


def draft_reserve_gap(
    target: Any, drafts: Sequence[Any], draft_configurators: Sequence[Any]
) -> str:
    """:func:`~sglang_specinit.phased.stock_binding.stock_reserve_gap` for a 0.5.23 launch: stock
    reserves ``spec_aux_config.eagle_draft_num_layers`` layers of ``target``'s geometry; each
    draft (runner or configurator) allocates ``layer_info.num_effective_layers``, on as many
    rows per target row as its configurator's ``loc_space_scale`` (``dcp`` under decode context
    parallelism: the draft pool is replicated). Stock scales its reserve by ``dcp`` only for a
    DSA target (``model_executor/pool_configurator.py:282-305``; the dense reserve has no DCP
    factor, #39799)."""
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
    """Whether stock's unified-memory price covers a draft fused into the target's pools.

    None where the draft does not fuse (no fused entry: :func:`stock_reserve_gap` decides).
    Under ``--enable-unified-memory`` 0.5.22+ may place every draft layer inside the target's
    sub-pool entries (``mem_cache/layout/fused_draft.py:627-680`` declines unless all of them
    fit), and stock's price per full-attention row is then that fused entry, built from the
    draft's own KV profile by the spec the pool factory allocates from
    (``mem_cache/kv_cache_configurator.py:1263-1287``, ``model_executor/pool_configurator.py:
    265-267``, ``:813-819``): the draft's rows cost what stock charges, whatever its geometry,
    so freeing the duplicate embed/lm_head first only adds rows at that price (""). A draft
    that also fuses into another sub-pool (SWA or mamba state, whose entries the unified
    envelope prices at the target's rows, ``:821-825``) is not vouched for (a reason)."""
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


def all_rank_min_free_at_sizing(runner: Any, inputs: BudgetInputs) -> int | None:
    """SGLang's all-rank minimum of free memory at sizing, recovered from the budget inputs.

    0.5.23's ``_profile_available_bytes`` returns ``min_free - (1 - f) * pre_load_free -
    multimodal_reservation``; ``measured_resident_bytes`` is ``f * pre_load_free`` minus that
    (:mod:`.runtime_budget`), so ``min_free = pre_load_free - measured_resident + reservation``.
    The reservation is SGLang's own (``mm_runtime_reservation_gb``, 0 for a text model). None
    for a mamba-state target, whose reading SGLang reshapes further (``_handle_max_mamba_cache``,
    a larger slack).
    """
    if getattr(runner, "mambaish_config", None) is not None:
        return None
    from sglang_specinit.sglang_0_5_23.release_shims import multimodal_reservation_gb

    reservation_gb = 0.0
    if runner.model_config.is_multimodal:
        reservation_gb = multimodal_reservation_gb()
    return inputs.pre_load_free_bytes - inputs.measured_resident_bytes + int(reservation_gb * GIB)


def rank_fields(scheduler: Any) -> dict[str, int]:
    """Where this scheduler sits in the launch, from 0.5.23's ``runtime_context.get_parallel()``
    (0.5.20: the scheduler's ``ParallelState``; ``release_shims.scheduler_ranks``).

    Replicas (``--dp`` without attention DP) are separate schedulers numbered by ``dp_rank``;
    under attention DP (``--attn-dp-size``, or the older ``--dp N --enable-dp-attention``)
    the DP ranks live inside the TP group, so the file name shows the attention-DP rank and
    the index adds nothing for it.
    """
    from sglang_specinit import rank_reports
    from sglang_specinit.sglang_0_5_23.release_shims import scheduler_ranks

    parallel = scheduler_ranks(scheduler)
    attn_dp = bool(parallel.attn_dp_enabled)
    replica = 0 if attn_dp else int(parallel.dp_rank or 0)
    return rank_reports.rank_fields(
        replica=replica,
        pp_rank=int(parallel.pp_rank),
        tp_rank=int(parallel.tp_rank),
        dp_rank=int(parallel.attn_dp_rank) if attn_dp else replica,
        attn_tp_rank=int(parallel.attn_tp_rank),
        pp_size=int(parallel.pp_size),
        tp_size=int(parallel.tp_size),
        dp_size=int(parallel.num_dp_ranks),
    )


def memory_breakdown(
    scheduler: Any, sizing: TargetSizing, rank_free_bytes: int | None = None
) -> dict[str, Any]:
    """The same quantities ``sglang-specinit plan --json`` prints, measured on this rank, with
    the rank's place in the launch and its tightness (``rank_free_bytes``: its own free
    memory at sizing, :func:`~sglang_specinit.runner_readings.rank_free_at_sizing`)."""
    from sglang_specinit.rank_reports import tightness_fields
    from sglang_specinit.report import plan_to_dict
    from sglang_specinit.sglang_0_5_23.release_shims import scheduler_ranks

    assert sizing.plan is not None and sizing.inputs is not None
    draft_runners = sizing.draft.pool_runners + [r for r, _ in sizing.draft.fixed_pools]
    breakdown = plan_to_dict(sizing.plan, sizing.inputs, tp_size=scheduler_ranks(scheduler).tp_size)
    # The installed release (this adapter serves two API generations: release_shims).
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
    breakdown.update(rank_fields(scheduler))
    breakdown.update(stage_fields(sizing, breakdown["pp_size"]))
    min_free = all_rank_min_free_at_sizing(scheduler.tp_worker.model_runner, sizing.inputs)
    breakdown.update(tightness_fields(rank_free_bytes, min_free))
    breakdown.update(rank_reports.cuda_fields_after_pools(scheduler.server_args.device))
    return breakdown


def stage_fields(sizing: TargetSizing, pp_size: int) -> dict[str, Any]:
    """What this pipeline stage priced (none under PP 1): whether it holds the draft, the
    tokens its own pricing affords, and whether it is the stage SGLang's minimum over stages
    came from (the tightest stage; each stage knows it alone, no collective added)."""
    if pp_size <= 1:
        return {}
    assert sizing.plan is not None
    own = sizing.stage_tokens if sizing.stage_tokens is not None else sizing.plan.tokens
    return {
        "pp_stage_holds_draft": sizing.stage_holds_draft,
        "pp_stage_priced": "target + draft pools" if sizing.stage_holds_draft else "target pool",
        "pp_stage_tokens": own,
        "pp_tightest_stage": own == sizing.plan.tokens,
    }


def log_memory_breakdown(
    scheduler: Any, sizing: TargetSizing, rank_free_bytes: int | None = None
) -> None:
    """Log this rank's breakdown, its tightness line and the ``SPECINIT_MEMORY`` JSON line;
    write its file when ``SGLANG_SPECINIT_REPORT_DIR`` is set (:func:`~sglang_specinit.
    rank_reports.log_breakdown`, with this module's logger)."""
    # Read again where the early binding ran inside SGLang's pool phase (bind_early).
    rank_free_bytes = getattr(scheduler, "_specinit_rank_free", rank_free_bytes)
    breakdown = memory_breakdown(scheduler, sizing, rank_free_bytes)
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
