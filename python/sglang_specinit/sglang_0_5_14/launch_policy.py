"""Which 0.5.14 / 0.5.15 launches get this package's draft pricing; the others keep stock
sizing after one line naming why. Beyond 0.5.23's list, frozen-KV MTP (the target pool is
allocated before the draft exists) and multi-layer EAGLE (hidden-state pool) keep stock."""

from __future__ import annotations

from typing import Any

from sglang_specinit.phased.step_aside import (
    PRICED_DEVICES,
    StepAside,
    holds_draft,
    known_spec_worker,
)

# Exact classes (a subclass may allocate more), named so that no scheduler imports them all.
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
    """None when this package prices the draft."""
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
    # A known draft worker is still bound early where stock's reserve covers it.
    binds = known_spec_worker(scheduler, KNOWN_SPEC_WORKERS)
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
    if not holds_draft(scheduler):
        return StepAside("this rank holds no draft model", warn=False)
    if not binds:
        known = STOCK_ONLY_WORKERS.get(type(spec_worker).__qualname__)
        return StepAside(
            known
            or f"{type(spec_worker).__name__} (a custom speculative worker) is not one whose "
            "allocations sglang-specinit knows"
        )
    return None
