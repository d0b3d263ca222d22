"""Which sglang 0.5.14 / 0.5.15 launches get this package's draft pricing, and why others do not.

Read (not patched): ``managers.scheduler.Scheduler`` (``draft_worker``, ``ps``,
``server_args``), ``configs.model_config``.

Where the pricing is not this package's to own, the launch keeps stock sizing and the
scheduler logs one line naming the reason: WARNING where the release's own reserve still
misprices the draft, INFO where there is no draft to price (NGRAM).

Beyond 0.5.23's list, two draft kinds keep stock sizing here because these releases allocate
them differently and no launch here tests them:

- frozen-KV MTP: 0.5.14 sizes and allocates the target pool *before* the draft worker exists
  (``Scheduler.init_model_worker``, ``managers/scheduler.py:862-864``), so there is no
  moment at which a draft-aware sizing could run; 0.5.15 drops that early call and gives the
  draft a 64-token stand-in pool (``frozen_kv_mtp_worker_v2.py:175-178``), untested here;
- multi-layer EAGLE: its draft keeps a per-request hidden-state pool
  (``MultiLayerEagleDraftWorker.alloc_memory_pool``, ``multi_layer_eagle_worker_v2.py:193``
  in 0.5.14) that this adapter does not price.
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.phased.step_aside import PRICED_DEVICES, StepAside

# The speculative workers whose allocations this adapter prices (exact classes: a subclass may
# allocate more), named rather than imported (a scheduler imports only its own algorithm's).
KNOWN_SPEC_WORKERS = frozenset(
    {
        ("sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2"),
        ("sglang.srt.speculative.standalone_worker_v2", "StandaloneWorkerV2"),
    }
)
STOCK_ONLY_WORKERS = {
    "MultiLayerEagleWorkerV2": "multi-layer EAGLE's per-request hidden-state pool is not "
    "priced by sglang-specinit on this release",
    "FrozenKVMTPWorkerV2": "frozen-KV MTP drafts are not priced by sglang-specinit on this "
    "release (0.5.14 allocates the target pool before the draft exists)",
}


def pricing_blocker(scheduler: Any) -> StepAside | None:
    """None when this package prices the draft of this launch."""
    from sglang.srt.configs.model_config import is_deepseek_v4

    from sglang_specinit import compat, sglang_0_5_14

    server_args = scheduler.server_args
    spec = scheduler.spec_algorithm
    problems = compat.launch_problems(scheduler, sglang_0_5_14)
    if problems:
        return StepAside("sglang-specinit is off in this process: " + "; ".join(problems))
    if spec.is_ngram():
        return StepAside("NGRAM has no draft model and no draft KV pool to price", warn=False)
    if spec.is_dflash():
        return StepAside("DFLASH drafts are not priced by sglang-specinit on this release")
    if server_args.device not in PRICED_DEVICES:
        return StepAside(f"device {server_args.device!r} builds its own KV pools")
    # Stock-sized launches of a known draft worker: the scheduler still binds the draft's
    # duplicate embed/lm_head first where stock's reserve covers the draft (stock_binding).
    binds = known_spec_worker(scheduler)
    # 0.5.15's flag (0.5.14 has none).
    if getattr(server_args, "enable_unified_memory", False):
        return StepAside(
            "--enable-unified-memory: one unified pool holds both models' KV and stock sizes "
            "it; unified pools are not priced by sglang-specinit",
            binds=binds,
        )
    if server_args.enable_hisparse:
        return StepAside(
            "--enable-hisparse: the draft pool spans the host-expanded id space; HiSparse "
            "pools are not priced by sglang-specinit",
            binds=binds,
        )
    if is_deepseek_v4(scheduler.model_config.hf_config):
        return StepAside(
            "DeepSeek-V4: stock's own configurator sizes its compressed pools; they are not "
            "priced by sglang-specinit",
            binds=binds,
        )
    if scheduler.ps.pp_size > 1:
        return StepAside(
            f"pipeline parallelism (PP {scheduler.ps.pp_size}): stock reserves the draft "
            "layers on every stage; sglang-specinit does not price per stage",
            binds=binds,
        )
    spec_worker = scheduler.draft_worker
    if spec_worker is None or getattr(spec_worker, "draft_worker", None) is None:
        return StepAside("this rank holds no draft model", warn=False)
    if not binds:
        known = STOCK_ONLY_WORKERS.get(type(spec_worker).__qualname__)
        return StepAside(
            known
            or f"{type(spec_worker).__name__} (a custom speculative worker) is not one whose "
            "allocations sglang-specinit knows"
        )
    return None


def known_spec_worker(scheduler: Any) -> bool:
    """The scheduler holds a draft from one of :data:`KNOWN_SPEC_WORKERS`."""
    spec_worker = scheduler.draft_worker
    if spec_worker is None or getattr(spec_worker, "draft_worker", None) is None:
        return False
    return (type(spec_worker).__module__, type(spec_worker).__qualname__) in KNOWN_SPEC_WORKERS
