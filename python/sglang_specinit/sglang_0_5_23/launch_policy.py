"""Which sglang 0.5.23 launches get this package's draft pricing, and why others do not.

Read (not patched): ``managers.scheduler.Scheduler`` (its ``draft_worker``), ``server_args``,
``runtime_context``, ``configs.model_config``.

0.5.23 already runs the phased init; the plugin only replaces how the target's token count is
priced. Where that pricing is not this package's to own, the launch keeps stock 0.5.23 and the
scheduler logs one line naming the reason: WARNING where 0.5.23's own reserve still misprices
the draft (the operator should know the draft is not budgeted exactly), INFO where there is
nothing to price (NGRAM) or upstream already prices the draft from its own config (DFLASH).
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.step_aside import PRICED_DEVICES, StepAside


def pricing_blocker(scheduler: Any) -> StepAside | None:
    """None when this package prices the draft of this launch."""
    from sglang_specinit import compat, sglang_0_5_23
    from sglang_specinit.sglang_0_5_23 import dsv4_sizing
    from sglang_specinit.sglang_0_5_23.release_shims import kv_cache_sharding, scheduler_ranks

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
    if server_args.enable_unified_memory:
        return StepAside("--enable-unified-memory sizes one unified/fused pool for both models")
    if server_args.enable_hisparse:
        return StepAside("--enable-hisparse prices the draft in its host-expanded id space")
    if kv_cache_sharding(server_args):
        return StepAside("--enable-kv-cache-sharding adds shard scratch the budget model omits")
    v4_reason = dsv4_sizing.runner_unpriced_reason(scheduler.tp_worker.model_runner)
    if v4_reason is not None:
        # Priced on paged NextN pools only (dsv4_sizing); these reserve the draft otherwise.
        return StepAside(f"DeepSeek-V4 with {v4_reason} keeps stock's (T + 1) / T draft reserve")
    parallel = scheduler_ranks(scheduler)
    if parallel.pp_size > 1:
        return StepAside("pipeline parallelism: the draft lives on the last stage only")
    spec_worker = scheduler.draft_worker
    if spec_worker is None or getattr(spec_worker, "draft_worker", None) is None:
        return StepAside("this rank holds no draft model", warn=False)
    if (type(spec_worker).__module__, type(spec_worker).__qualname__) not in KNOWN_SPEC_WORKERS:
        return StepAside(
            f"{type(spec_worker).__name__} (a custom speculative worker) is not one whose "
            "allocations sglang-specinit knows"
        )
    layout = getattr(spec_worker, "draft_parallel_layout", None)
    attn_tp = parallel.attn_tp_size
    if layout is not None and layout.attn_tp_size != attn_tp:
        return StepAside(
            f"the draft's attention-TP size ({layout.attn_tp_size}) differs from the "
            f"target's ({attn_tp})"
        )
    return None


# The speculative workers whose allocations describe_draft knows: exact classes (a subclass may
# allocate more), named rather than imported (a scheduler imports only its own algorithm's).
KNOWN_SPEC_WORKERS = frozenset(
    {
        ("sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2"),
        ("sglang.srt.speculative.standalone_worker_v2", "StandaloneWorkerV2"),
        ("sglang.srt.speculative.multi_layer_eagle_worker_v2", "MultiLayerEagleWorkerV2"),
        ("sglang.srt.speculative.frozen_kv_mtp_worker_v2", "FrozenKVMTPWorkerV2"),
    }
)
