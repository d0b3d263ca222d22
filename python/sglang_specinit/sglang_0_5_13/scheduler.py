"""Scheduler-driven phased init (sglang 0.5.13 / 0.5.13.post1).

Wraps ``Scheduler.init_model_worker``; adds ``Scheduler.init_target_memory_pool``,
``Scheduler.init_memory_pools`` and ``Scheduler.init_all_backends``.

0.5.13.x builds the target worker completely (pool included) before the draft exists, so the
target pool is sized without the draft and the draft lands on top of ``--mem-fraction-static``.
Here the worker constructors only load weights; then all pools are sized together, then all
backends and graphs are built. SGLang's own ``init_model_worker`` then runs with the two loads
already done, so everything it does after them (worker dispatch, ``get_worker_info``) is stock.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from sglang_specinit.sglang_0_5_13.runtime_budget import DraftDescription, SpeculativeSizing
from sglang_specinit.sglang_0_5_13.state import defer_pools
from sglang_specinit.sglang_0_5_13.tp_worker import runners_of
from sglang_specinit.specs import FROZEN_KV_STAND_IN_TOKENS, runner_layer_count

logger = logging.getLogger(__name__)

MEMORY_LOG_PREFIX = "SPECINIT_MEMORY "


def _timed(scheduler: Any, label: str, step: Callable[[], Any]) -> None:
    start = time.perf_counter()
    step()
    elapsed = time.perf_counter() - start
    scheduler._specinit_phase_log.append((label, elapsed))
    logger.info("[specinit] phase %s done in %.2f s", label, elapsed)


def draft_tp_worker(draft_worker: Any) -> Any:
    """The TpModelWorker holding a draft worker's model runners."""
    from sglang.srt.managers.tp_worker import TpModelWorker

    if isinstance(draft_worker, TpModelWorker):  # frozen-KV MTP is its own TpModelWorker
        return draft_worker
    inner = getattr(draft_worker, "_draft_worker", draft_worker)
    return inner.draft_worker


def describe_draft(draft_worker: Any) -> DraftDescription:
    """Which of a draft worker's runners own weights, token-sized pools and fixed pools."""
    from sglang.srt.speculative.frozen_kv_mtp_worker import FrozenKVMTPWorker
    from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleWorkerV2

    from sglang_specinit.sglang_0_5_13.multi_layer_eagle import hidden_state_row_bytes

    if draft_worker is None:
        return DraftDescription()
    runners = runners_of(draft_tp_worker(draft_worker))
    if isinstance(draft_worker, FrozenKVMTPWorker):
        return DraftDescription(
            weight_runners=runners, fixed_pools=[(r, FROZEN_KV_STAND_IN_TOKENS) for r in runners]
        )
    description = DraftDescription(weight_runners=runners, pool_runners=runners)
    if isinstance(draft_worker, MultiLayerEagleWorkerV2):
        description.bytes_per_request = hidden_state_row_bytes(draft_worker._draft_worker)
    return description


def phasing_blocker(scheduler: Any) -> str | None:
    """Why this launch keeps SGLang's stock init (None: it is phased)."""
    from sglang_specinit.compat import is_model_less_worker, phased_worker_classes
    from sglang_specinit.sglang_0_5_13.model_runner import PHASED_DEVICES

    server_args = scheduler.server_args
    if scheduler.spec_algorithm.is_none():
        return "not speculative"
    if server_args.device not in PHASED_DEVICES:
        return f"device {server_args.device!r} is not one of {PHASED_DEVICES}"
    if server_args.enable_hisparse:
        return "--enable-hisparse builds its coordinator inside ModelRunner.initialize"
    from sglang.srt.configs.model_config import is_deepseek_v4

    if is_deepseek_v4(scheduler.model_config.hf_config):
        # Its compressed c4/c128/state pools are not priced by the budget model; stock keeps
        # its own (T+1)/T draft reservation for this family, which is better than a guess.
        return "DeepSeek-V4 compressed KV pools are not priced by sglang-specinit"
    worker_class = scheduler.spec_algorithm.create_worker(server_args)
    if worker_class in phased_worker_classes() or is_model_less_worker(worker_class):
        return None
    from sglang_specinit.sglang_0_5_13 import tp_worker

    # A TpModelWorker subclass inherits this plugin's generic TpModelWorker phase methods; they
    # do not make its own constructor safe to cut (it may read pool sizes after super().__init__).
    generic = {
        "alloc_memory_pool": tp_worker.alloc_memory_pool,
        "init_backends": tp_worker.init_backends,
    }
    if all(
        callable(method := getattr(worker_class, name, None)) and method is not generic[name]
        for name in generic
    ):
        return None  # a plugin algorithm that implements the phases itself
    return (
        f"{worker_class.__name__} (a custom speculative algorithm) does not implement "
        "alloc_memory_pool/init_backends itself, so it is built the stock way"
    )


def predict_draft_layers(server_args: Any) -> int:
    """Read the draft's layer count from its config before any weights load.

    Also the earliest point a bad draft path can be reported, before the target loads.
    """
    from sglang.srt.configs.model_config import ModelConfig

    path = server_args.speculative_draft_model_path
    if path is None:
        raise ValueError(
            f"--speculative-algorithm {server_args.speculative_algorithm} needs "
            "--speculative-draft-model-path (a directory or hub id with a config.json)"
        )
    try:
        config = ModelConfig.from_server_args(
            server_args,
            model_path=path,
            model_revision=server_args.speculative_draft_model_revision,
            is_draft_model=True,
        )
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"sglang-specinit: cannot read the draft model config at {path!r} ({exc}). "
            "Pass --speculative-draft-model-path pointing at a checkpoint with a config.json."
        ) from exc
    return runner_layer_count(config, is_draft=True)


def init_model_worker(original: Any, self: Any) -> None:
    """AROUND hook: the four phases, then SGLang's own remainder of init_model_worker."""
    blocker = phasing_blocker(self)
    if blocker is not None:
        if not self.spec_algorithm.is_none():
            logger.warning(
                "[specinit] stock speculative init (draft memory NOT budgeted): %s", blocker
            )
        return original(self)
    from sglang_specinit.compat import is_model_less_worker

    self._specinit_phase_log = []
    worker_class = self.spec_algorithm.create_worker(self.server_args)
    # A draft without a model (NGRAM) has nothing to load; it is built in the pool phase,
    # once the target's request count exists.
    self._specinit_model_less_draft = is_model_less_worker(worker_class)
    if not self._specinit_model_less_draft:
        self._specinit_predicted_draft_layers = predict_draft_layers(self.server_args)
    with defer_pools():
        _timed(self, "1/4 load target weights", self.init_tp_model_worker)
        if self._specinit_model_less_draft:
            self.draft_worker = None
            logger.info(
                "[specinit] phase 2/4 load draft weights: none, %s has no model",
                worker_class.__name__,
            )
        else:
            _timed(self, "2/4 load draft weights", self.maybe_init_draft_worker)
    _timed(self, "3/4 allocate KV pools", self.init_memory_pools)
    _timed(self, "4/4 attention backends and graphs", self.init_all_backends)
    log_memory_breakdown(self)
    # Both loads are done: let the stock method run its dispatch and worker-info tail.
    self.init_tp_model_worker = _already_done
    self.maybe_init_draft_worker = _already_done
    try:
        original(self)
    finally:
        del self.init_tp_model_worker
        del self.maybe_init_draft_worker


def _already_done() -> None:
    return None


def init_target_memory_pool(self: Any) -> None:
    """Size and allocate the target's pools, pricing the draft in (idempotent)."""
    runner = self.tp_worker.model_runner
    if getattr(runner, "token_to_kv_pool", None) is not None:
        return
    description = describe_draft(self.draft_worker)
    if description.pool_runners:
        _check_predicted_layers(self, description.pool_runners)
    runner._specinit_sizing = SpeculativeSizing(
        algorithm=self.server_args.speculative_algorithm, draft=description
    )
    self.tp_worker.alloc_memory_pool()


def _check_predicted_layers(scheduler: Any, draft_runners: list[Any]) -> None:
    predicted = getattr(scheduler, "_specinit_predicted_draft_layers", None)
    live = draft_runners[0].num_effective_layers
    if predicted is not None and predicted != live:
        logger.warning(
            "[specinit] draft config predicted %d KV layers but the draft runner has %d; "
            "sizing with the runner's value",
            predicted,
            live,
        )


def init_memory_pools(self: Any) -> None:
    """Target pools first (they set the token count), then the draft's on the same config."""
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


def init_all_backends(self: Any) -> None:
    self.tp_worker.init_backends()
    if self.draft_worker is not None and hasattr(self.draft_worker, "init_backends"):
        self.draft_worker.init_backends()


def kv_pool_allocated_bytes(runner: Any) -> int:
    """Bytes of the KV buffers a runner really allocated."""
    pool = runner.token_to_kv_pool
    if hasattr(pool, "get_kv_size_bytes"):
        sizes = pool.get_kv_size_bytes()
        return int(sum(sizes)) if isinstance(sizes, tuple) else int(sizes)
    return 0


def memory_breakdown(scheduler: Any) -> dict[str, Any]:
    """The same quantities ``sglang-specinit plan --json`` prints, measured on this rank."""
    from sglang_specinit.report import plan_to_dict

    sizing = scheduler.tp_worker.model_runner._specinit_sizing
    draft_runners = sizing.draft.pool_runners + [r for r, _ in sizing.draft.fixed_pools]
    target_runner = scheduler.tp_worker.model_runner
    breakdown = plan_to_dict(sizing.plan, sizing.inputs, tp_size=scheduler.server_args.tp_size)
    breakdown["allocated_target_kv_pool_bytes"] = kv_pool_allocated_bytes(target_runner)
    breakdown["allocated_draft_kv_pool_bytes"] = sum(
        kv_pool_allocated_bytes(dr) for dr in draft_runners
    )
    breakdown.update(rank_fields(scheduler))
    breakdown.update(tightness_fields(sizing.free_at_sizing))
    if scheduler.server_args.device == "cuda":
        import torch

        # What the device really holds after init, for the GPU suite to compare with the plan.
        free, _total = torch.cuda.mem_get_info()
        breakdown["cuda_free_bytes_after_init"] = int(free)
        breakdown["cuda_torch_allocated_bytes"] = int(torch.cuda.memory_allocated())
    breakdown["phase_seconds"] = {label: round(s, 3) for label, s in scheduler._specinit_phase_log}
    return breakdown


def rank_fields(scheduler: Any) -> dict[str, int]:
    """Where this scheduler sits in the launch, from SGLang's ``ParallelState``.

    ``rank_index`` numbers every scheduler process of the launch once: DP replicas (separate
    schedulers, ``--dp`` without ``--enable-dp-attention``) x PP stages x TP ranks. Under
    dp-attention the DP ranks live inside the TP group, so they add no index of their own.
    """
    from sglang_specinit.rank_reports import scheduler_rank_index

    ps = scheduler.ps
    server_args = scheduler.server_args
    dp_rank = ps.dp_rank or 0
    replica = 0 if server_args.enable_dp_attention else dp_rank
    return {
        "rank_index": scheduler_rank_index(replica, ps.pp_rank, ps.tp_rank, ps.pp_size, ps.tp_size),
        "tp_rank": ps.tp_rank,
        "pp_rank": ps.pp_rank,
        "dp_rank": dp_rank,
        "attn_tp_rank": ps.attn_tp_rank,
        "pp_size": ps.pp_size,
        "dp_size": ps.dp_size,
    }


def tightness_fields(free: Any) -> dict[str, Any]:
    """This rank's free memory at sizing next to the all-rank minimum the budget was built on.

    Every rank already holds both numbers (its own reading and SGLang's MIN all-reduce), so
    each decides alone whether it is the tightest; no collective is added.
    """
    from sglang_specinit.rank_reports import TIGHTEST_TOLERANCE_BYTES

    if free is None:
        return {"rank_free_at_sizing_bytes": None, "tightest_rank": None}
    return {
        "rank_free_at_sizing_bytes": free.rank_bytes,
        "min_free_at_sizing_bytes": free.all_rank_min_bytes,
        "free_above_tightest_bytes": free.above_min_bytes,
        "tightest_rank": free.above_min_bytes <= TIGHTEST_TOLERANCE_BYTES,
    }


def log_memory_breakdown(scheduler: Any) -> None:
    from sglang_specinit.rank_reports import breakdown_file_name, rank_label, tightness
    from sglang_specinit.report import render_breakdown

    breakdown = memory_breakdown(scheduler)
    scheduler._specinit_breakdown = breakdown
    logger.info(
        "[specinit] memory after init (%s):\n%s", rank_label(breakdown), render_breakdown(breakdown)
    )
    logger.info("[specinit] %s", tightness(breakdown))
    logger.info("%s%s", MEMORY_LOG_PREFIX, json.dumps(breakdown, sort_keys=True))
    report_dir = os.environ.get("SGLANG_SPECINIT_REPORT_DIR")
    if report_dir:
        path = os.path.join(report_dir, breakdown_file_name(breakdown))
        with open(path, "w") as f:
            json.dump(breakdown, f, sort_keys=True)


SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
HOOKS = ((f"{SCHEDULER}.init_model_worker", init_model_worker),)
NEW_METHODS = (
    (SCHEDULER, "init_target_memory_pool", init_target_memory_pool),
    (SCHEDULER, "init_memory_pools", init_memory_pools),
    (SCHEDULER, "init_all_backends", init_all_backends),
)
