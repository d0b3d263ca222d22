"""Scheduler-driven phased init (0.5.13 / 0.5.13.post1).

0.5.13 builds the target worker, pool included, before the draft exists, so the draft lands on
top of ``--mem-fraction-static``. Here the worker constructors only load weights, then all pools
are sized together, then all backends are built; SGLang's own ``init_model_worker`` then runs
its tail with both loads done.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from sglang_specinit import rank_reports
from sglang_specinit.hooks import is_instance_of
from sglang_specinit.model_facts import FROZEN_KV_STAND_IN_TOKENS
from sglang_specinit.patch_table import PatchTable
from sglang_specinit.runner_readings import kv_pool_allocated_bytes
from sglang_specinit.sglang_0_5_13.model_runner import (
    EARLY_DRAFT_LAYERS_ATTR,
    early_draft_num_layers,
    warn_if_draft_layers_differ,
)
from sglang_specinit.sglang_0_5_13.runtime_budget import DraftDescription, SpeculativeSizing
from sglang_specinit.sglang_0_5_13.state import defer_pools
from sglang_specinit.sglang_0_5_13.tp_worker import MODULE as TP_WORKER_MODULE
from sglang_specinit.sglang_0_5_13.tp_worker import runners_of

logger = logging.getLogger(__name__)


MODULE = "sglang.srt.managers.scheduler"
patch = PatchTable(MODULE)


def _timed(scheduler: Any, label: str, step: Callable[[], Any], detail: str = "") -> None:
    start = time.perf_counter()
    step()
    elapsed = time.perf_counter() - start
    scheduler._specinit_phase_log.append((label, elapsed))
    logger.info("[specinit] phase %s done in %.2f s%s", label, elapsed, detail)


def describe_draft(draft_worker: Any) -> DraftDescription:
    from sglang.srt.managers.tp_worker import TpModelWorker

    from sglang_specinit.sglang_0_5_13 import draft_workers

    if draft_worker is None:
        return DraftDescription()
    tp_worker = draft_worker  # frozen-KV MTP is its own TpModelWorker
    if not isinstance(draft_worker, TpModelWorker):
        tp_worker = getattr(draft_worker, "_draft_worker", draft_worker).draft_worker
    runners = runners_of(tp_worker)
    if is_instance_of(draft_worker, draft_workers.FROZEN_KV_MODULE, "FrozenKVMTPWorker"):
        return DraftDescription(
            weight_runners=runners, fixed_pools=[(r, FROZEN_KV_STAND_IN_TOKENS) for r in runners]
        )
    description = DraftDescription(weight_runners=runners, pool_runners=runners)
    multi_layer = (draft_workers.MULTI_LAYER_MODULE, draft_workers.MULTI_LAYER_WORKER)
    if is_instance_of(draft_worker, *multi_layer):
        description.bytes_per_request = draft_workers.hidden_state_row_bytes(
            draft_worker._draft_worker
        )
    return description


@patch.around("Scheduler.init_model_worker", params=())
@patch.calls("Scheduler.init_tp_model_worker", "Scheduler.maybe_init_draft_worker")
def init_model_worker(original: Any, self: Any) -> None:
    from sglang_specinit.sglang_0_5_13.launch_policy import (
        facts_from_scheduler,
        is_model_less_worker,
        phasing_blocker,
    )
    from sglang_specinit.sglang_0_5_13.server_args import restore_stock_fraction

    facts = facts_from_scheduler(self)
    blocker = phasing_blocker(facts)
    if blocker is not None:
        if facts.algorithm is not None:
            restored = restore_stock_fraction(self.server_args)
            ps = self.ps
            if ps.tp_rank == 0 and ps.pp_rank == 0 and not getattr(ps, "dp_rank", None):
                logger.warning(
                    "[specinit] stock speculative init (draft memory NOT budgeted): %s%s",
                    blocker,
                    f"; automatic --mem-fraction-static back to stock {restored}"
                    if restored is not None
                    else "",
                )
        return original(self)

    self._specinit_phase_log = []
    worker_class = facts.worker_class
    # Read before any weights load, as 0.5.14 does; phase 3 compares the runners.
    early_layers = early_draft_num_layers(self.server_args)
    self._specinit_eagle_draft_num_layers = early_layers
    layers_detail = (
        f" ({EARLY_DRAFT_LAYERS_ATTR}={early_layers}, from the draft config before loading)"
        if early_layers is not None
        else ""
    )
    # NGRAM is built in the pool phase, once the target's request count exists.
    self._specinit_model_less_draft = is_model_less_worker(worker_class)
    with defer_pools():
        _timed(self, "1/4 load target weights", self.init_tp_model_worker, layers_detail)
        if early_layers is not None:  # where 0.5.14 keeps it
            setattr(self.tp_worker.model_runner, EARLY_DRAFT_LAYERS_ATTR, early_layers)
        if self._specinit_model_less_draft:
            self.draft_worker = None
            logger.info(
                "[specinit] phase 2/4 load draft weights: none, %s has no model",
                worker_class.__name__,
            )
        else:
            _timed(self, "2/4 load draft weights", self.maybe_init_draft_worker)
    _timed(self, "3/4 allocate KV pools", self.init_memory_pools)
    self._specinit_cuda_after_pools = cuda_memory_after_pools(self.server_args)
    _timed(self, "4/4 attention backends and graphs", self.init_all_backends)
    log_memory_breakdown(self)
    self.init_tp_model_worker = _already_done
    self.maybe_init_draft_worker = _already_done
    try:
        original(self)
    finally:
        del self.init_tp_model_worker
        del self.maybe_init_draft_worker


def _already_done() -> None:
    return None


@patch.adds("Scheduler")
def init_target_memory_pool(self: Any) -> None:
    runner = self.tp_worker.model_runner
    if getattr(runner, "token_to_kv_pool", None) is not None:
        return
    description = describe_draft(self.draft_worker)
    runner._specinit_sizing = SpeculativeSizing(
        algorithm=self.server_args.speculative_algorithm, draft=description
    )
    self.tp_worker.alloc_memory_pool()


@patch.adds("Scheduler")
@patch.calls("TpModelWorker.get_memory_pool", module=TP_WORKER_MODULE)
def init_memory_pools(self: Any) -> None:
    self.init_target_memory_pool()
    if getattr(self, "_specinit_model_less_draft", False):
        self.maybe_init_draft_worker()
        return
    if self.draft_worker is None:
        return
    req_to_token_pool, allocator = self.tp_worker.get_memory_pool()
    self.draft_worker.alloc_memory_pool(
        memory_pool_config=self.tp_worker.model_runner.memory_pool_config,
        req_to_token_pool=req_to_token_pool,
        token_to_kv_pool_allocator=allocator,
    )
    draft = self.tp_worker.model_runner._specinit_sizing.draft
    warn_if_draft_layers_differ(
        getattr(self, "_specinit_eagle_draft_num_layers", None),
        [*draft.pool_runners, *(runner for runner, _ in draft.fixed_pools)],
    )


@patch.adds("Scheduler")
def init_all_backends(self: Any) -> None:
    self.tp_worker.init_backends()
    if self.draft_worker is not None and hasattr(self.draft_worker, "init_backends"):
        self.draft_worker.init_backends()


def cuda_memory_after_pools(server_args: Any) -> dict[str, int]:
    """CUDA's free bytes before any graph (cache emptied, as SGLang's pre-load reading), to
    compare what the device lost with ``budget_bytes``."""
    if server_args.device != "cuda":
        return {}
    import torch

    torch.cuda.empty_cache()
    free, _total = torch.cuda.mem_get_info()
    return {
        "cuda_free_bytes_after_pools": int(free),
        "cuda_torch_allocated_bytes_after_pools": int(torch.cuda.memory_allocated()),
        "cuda_torch_reserved_bytes_after_pools": int(torch.cuda.memory_reserved()),
    }


def log_memory_breakdown(scheduler: Any) -> None:
    from sglang_specinit.report import plan_to_dict

    sizing = scheduler.tp_worker.model_runner._specinit_sizing
    draft_runners = sizing.draft.pool_runners + [r for r, _ in sizing.draft.fixed_pools]
    target_runner = scheduler.tp_worker.model_runner
    breakdown = plan_to_dict(sizing.plan, sizing.inputs, tp_size=scheduler.server_args.tp_size)
    breakdown["allocated_target_kv_pool_bytes"] = kv_pool_allocated_bytes(target_runner)
    breakdown["allocated_draft_kv_pool_bytes"] = sum(
        kv_pool_allocated_bytes(dr) for dr in draft_runners
    )
    breakdown.update(
        rank_reports.parallel_state_rank_fields(
            scheduler.ps, scheduler.server_args.enable_dp_attention
        )
    )
    free = sizing.free_at_sizing
    readings = (None, None) if free is None else (free.rank_bytes, free.all_rank_min_bytes)
    breakdown.update(rank_reports.tightness_fields(*readings))
    for key in ("model_path", "speculative_algorithm", "speculative_draft_model_path"):
        breakdown[key] = getattr(scheduler.server_args, key, None)
    if scheduler.server_args.device == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info()
        breakdown["cuda_free_bytes_after_init"] = int(free)
        breakdown["cuda_torch_allocated_bytes"] = int(torch.cuda.memory_allocated())
    breakdown.update(getattr(scheduler, "_specinit_cuda_after_pools", {}))
    breakdown["phase_seconds"] = {label: round(s, 3) for label, s in scheduler._specinit_phase_log}
    scheduler._specinit_breakdown = breakdown
    rank_reports.log_breakdown(logger, breakdown, "memory after init")


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
