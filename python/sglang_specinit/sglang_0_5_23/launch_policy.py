"""Which 0.5.23 launches get this package's draft pricing, and why the others do not.

A launch not priced here keeps stock sizing after one line naming why: WARNING where stock
still misprices the draft, INFO where there is nothing to price (NGRAM, DFLASH).
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.phased.step_aside import (
    PRICED_DEVICES,
    StepAside,
    holds_draft,
    known_spec_worker,
)


def pricing_blocker(scheduler: Any) -> StepAside | None:
    """None when this package prices the draft of this launch."""
    from sglang_specinit import compat, sglang_0_5_23
    from sglang_specinit.sglang_0_5_23.release_shims import scheduler_ranks

    server_args = scheduler.server_args
    spec = scheduler.spec_algorithm
    problems = compat.launch_problems(scheduler, sglang_0_5_23, compat.installed_sglang_version())
    if problems:
        return StepAside("sglang-specinit is off in this process: " + "; ".join(problems))
    if spec.is_ngram():
        return StepAside("NGRAM has no draft model and no draft KV pool to price", warn=False)
    if spec.is_dflash_family():
        return StepAside(
            "DFLASH-family drafts are priced from their own config by sglang "
            f"{compat.installed_sglang_version()} itself",
            warn=False,
        )
    if server_args.device not in PRICED_DEVICES:
        return StepAside(f"device {server_args.device!r} builds its own KV pools")
    binds = known_spec_worker(scheduler, KNOWN_SPEC_WORKERS)
    parallel = scheduler_ranks(scheduler)
    flagged = stock_sized_reason(scheduler, parallel.pp_size)
    if flagged:
        return StepAside(flagged, binds=binds)
    spec_worker = scheduler.draft_worker
    if spec_worker is None and stage_without_draft(parallel.pp_rank, parallel.pp_size):
        return None  # priced as its target pool alone (the draft is on the last stage)
    if not holds_draft(scheduler):
        return StepAside("this rank holds no draft model", warn=False)
    if not binds:
        return StepAside(
            f"{type(spec_worker).__name__} (a custom speculative worker) is not one whose "
            "allocations sglang-specinit knows"
        )
    layout = getattr(spec_worker, "draft_parallel_layout", None)
    attn_tp = parallel.attn_tp_size
    if layout is not None and layout.attn_tp_size != attn_tp:
        # Its pool is built inside the draft's group, which the probe would misprice.
        return StepAside(
            f"the draft runs attention on a TP group of {layout.attn_tp_size} (context "
            f"parallelism, --attn-cp-size {parallel.attn_cp_size}) and the target on "
            f"{attn_tp}: its pool is built in a group sglang-specinit does not price in",
            binds=True,
        )
    return None


def stock_sized_reason(scheduler: Any, pp_size: int) -> str:
    """Why a launch flag keeps stock's sizing ("" if none); docs/limits.md has each case."""
    from sglang.srt.configs.model_config import is_deepseek_v4

    from sglang_specinit.sglang_0_5_23.release_shims import kv_cache_sharding

    server_args = scheduler.server_args
    if server_args.enable_unified_memory:
        return (
            "--enable-unified-memory: one byte envelope holds the target's pools and stock "
            "sizes the draft beside it (HybridSWAPoolConfigurator); unified pools are not "
            "priced by sglang-specinit"
        )
    if server_args.enable_hisparse:
        return (
            "--enable-hisparse: the draft pool spans the host-expanded id space and stock "
            "scales its draft reserve by the host-to-device ratio; HiSparse pools are not "
            "priced by sglang-specinit"
        )
    if kv_cache_sharding(server_args):
        return (
            "--enable-kv-cache-sharding: stock charges the shard assembly scratch (target "
            "and MTP) before sizing; sharded pools are not priced by sglang-specinit"
        )
    if is_deepseek_v4(scheduler.model_config.hf_config):
        from sglang_specinit.sglang_0_5_23 import dsv4_sizing

        try:
            v4_reason = dsv4_sizing.runner_unpriced_reason(scheduler.tp_worker.model_runner)
        except Exception as exc:  # a layout this reading does not know keeps stock's sizing
            v4_reason = f"a layout sglang-specinit cannot read ({type(exc).__name__}: {exc})"
        if v4_reason is not None:
            return f"DeepSeek-V4 with {v4_reason} keeps stock's (T + 1) / T draft reserve"
    if pp_size > 1:
        return pp_unpriced_reason(scheduler, pp_size)
    return ""


def stage_without_draft(pp_rank: int, pp_size: int) -> bool:
    """A PP stage without the draft (``SGLANG_ENABLE_PP_SPEC``: only the last stage has it)."""
    from sglang_specinit.sglang_0_5_23.release_shims import pp_spec_enabled

    return pp_size > 1 and pp_rank != pp_size - 1 and pp_spec_enabled()


def pp_unpriced_reason(scheduler: Any, pp_size: int) -> str:
    """Why a PP launch keeps stock's sizing ("" where each stage is priced on its own)."""
    from sglang.srt.configs.hybrid_arch import mambaish_config

    from sglang_specinit.sglang_0_5_23.release_shims import pp_spec_enabled

    head = f"pipeline parallelism (PP {pp_size})"
    if not pp_spec_enabled():
        return (
            f"{head} without SGLANG_ENABLE_PP_SPEC (PD prefill): every stage builds the "
            "draft and stock reserves its layers on each; sglang-specinit prices PP stages "
            "only with SGLANG_ENABLE_PP_SPEC=1 (a prefill stage's draft is not checked here)"
        )
    model_config = scheduler.model_config
    if mambaish_config(model_config) is not None:
        return (
            f"{head} with a hybrid linear-attention target: a stage may hold no "
            "full-attention layer and stock charges the largest stage's mamba share; "
            "sglang-specinit does not price these stages"
        )
    if model_config.is_hybrid_swa:
        return (
            f"{head} with a hybrid sliding-window target: sglang-specinit does not price "
            "its stages (not checked per stage)"
        )
    return ""


# Exact classes whose allocations describe_draft knows (a subclass may allocate more).
KNOWN_SPEC_WORKERS = frozenset(
    {
        ("sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2"),
        ("sglang.srt.speculative.standalone_worker_v2", "StandaloneWorkerV2"),
        ("sglang.srt.speculative.multi_layer_eagle_worker_v2", "MultiLayerEagleWorkerV2"),
        ("sglang.srt.speculative.frozen_kv_mtp_worker_v2", "FrozenKVMTPWorkerV2"),
    }
)
