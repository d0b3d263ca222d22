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
3. logs the memory breakdown (the ``SPECINIT_MEMORY`` line, same keys as ``plan --json``).

Launches it does not price run SGLang's method unchanged, after one log line naming why.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from sglang_specinit.hooks import Hook, Requires
from sglang_specinit.live_sizing import storage_bytes
from sglang_specinit.sglang_0_5_23.draft_pricing import describe_draft
from sglang_specinit.sglang_0_5_23.eagle import bind_shared_weights_early
from sglang_specinit.sglang_0_5_23.launch_policy import pricing_blocker
from sglang_specinit.sglang_0_5_23.runtime_budget import TargetSizing, sizing_active

logger = logging.getLogger(__name__)

MODULE = "sglang.srt.managers.scheduler"
MEMORY_LOG_PREFIX = "SPECINIT_MEMORY "


def draft_duplicate_bytes(scheduler: Any, description: Any) -> int:
    """Bytes of draft weight storages not shared with the target (before/after binding).

    The difference across the early binding is what stock 0.5.23 keeps resident twice while
    it profiles the target pool.
    """
    target = storage_bytes([scheduler.tp_worker.model_runner.model])
    draft = storage_bytes([r.model for r in description.weight_runners], target)
    return sum(draft.values())


def init_memory_pools(original: Any, self: Any) -> None:
    """AROUND hook: early binding + exact draft pricing around SGLang's own pool phase."""
    if self.spec_algorithm.is_none():
        return original(self)
    blocker = pricing_blocker(self)
    if blocker is not None:
        log = logger.warning if blocker.warn else logger.info
        log(
            "[specinit] stock sglang 0.5.23 KV sizing%s: %s",
            " (draft KV priced at the target's geometry)" if blocker.warn else "",
            blocker.reason,
        )
        return original(self)
    description = describe_draft(self.draft_worker)
    before = draft_duplicate_bytes(self, description)
    bind_shared_weights_early(self.draft_worker)
    after = draft_duplicate_bytes(self, description)
    sizing = TargetSizing(
        draft=description,
        duplicate_bytes_at_profile=0,
        stock_duplicate_bytes=max(before - after, 0),
    )
    with sizing_active(sizing):
        original(self)
    if sizing.plan is None:
        return  # the configurator stepped aside (and said why)
    self._specinit_sizing = sizing
    log_memory_breakdown(self, sizing)


def kv_pool_allocated_bytes(runner: Any) -> int:
    """Bytes of the KV buffers a runner really allocated."""
    pool = getattr(runner, "token_to_kv_pool", None)
    if pool is None or not hasattr(pool, "get_kv_size_bytes"):
        return 0
    sizes = pool.get_kv_size_bytes()
    return int(sum(sizes)) if isinstance(sizes, tuple) else int(sizes)


def memory_breakdown(scheduler: Any, sizing: TargetSizing) -> dict[str, Any]:
    """The same quantities ``sglang-specinit plan --json`` prints, measured on this rank."""
    from sglang.srt.runtime_context import get_parallel

    from sglang_specinit.report import plan_to_dict

    assert sizing.plan is not None and sizing.inputs is not None
    draft_runners = sizing.draft.pool_runners + [r for r, _ in sizing.draft.fixed_pools]
    breakdown = plan_to_dict(sizing.plan, sizing.inputs, tp_size=get_parallel().tp_size)
    breakdown["sglang_version"] = "0.5.23"
    breakdown["allocated_target_kv_pool_bytes"] = kv_pool_allocated_bytes(
        scheduler.tp_worker.model_runner
    )
    breakdown["allocated_draft_kv_pool_bytes"] = sum(
        kv_pool_allocated_bytes(r) for r in draft_runners
    )
    breakdown["upstream_reserved_layers"] = sizing.upstream_reserved_layers
    breakdown["stock_duplicate_bytes_at_profile"] = sizing.stock_duplicate_bytes
    breakdown["duplicate_bytes_at_profile"] = sizing.duplicate_bytes_at_profile
    breakdown["tp_rank"] = get_parallel().tp_rank
    if scheduler.server_args.device == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info()
        breakdown["cuda_free_bytes_after_pools"] = int(free)
        breakdown["cuda_torch_allocated_bytes"] = int(torch.cuda.memory_allocated())
    return breakdown


def log_memory_breakdown(scheduler: Any, sizing: TargetSizing) -> None:
    from sglang_specinit.report import render_breakdown

    breakdown = memory_breakdown(scheduler, sizing)
    scheduler._specinit_breakdown = breakdown
    logger.info(
        "[specinit] KV pools on sglang 0.5.23 (rank %d):\n%s",
        breakdown["tp_rank"],
        render_breakdown(breakdown),
    )
    logger.info("%s%s", MEMORY_LOG_PREFIX, json.dumps(breakdown, sort_keys=True))
    report_dir = os.environ.get("SGLANG_SPECINIT_REPORT_DIR")
    if report_dir:
        path = os.path.join(report_dir, f"memory-rank{breakdown['tp_rank']}.json")
        with open(path, "w") as f:
            json.dump(breakdown, f, sort_keys=True)


HOOKS = (Hook(MODULE, "Scheduler.init_memory_pools", init_memory_pools, params=()),)
NEW_METHODS = ()
REQUIRES = (
    Requires(MODULE, "Scheduler.init_target_memory_pool"),
    Requires("sglang.srt.speculative.base_spec_worker", "BaseSpecWorker.draft_worker"),
    Requires("sglang.srt.speculative.base_spec_worker", "EagleDraftWorkerBase.draft_runners"),
)
