"""Which speculative launches the 0.5.13 phased init takes over: one predicate, asked by the
launcher (only a phased launch may drop the flat draft reserve from the automatic fraction) and
by the scheduler, which puts the reserve back if it declines what the launcher accepted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sglang_specinit.sglang_0_5_13.model_runner import PHASED_DEVICES

# Named, not imported: ngram_worker imports sgl_kernel, which only CUDA builds have.
MODEL_LESS_WORKERS = frozenset({("sglang.srt.speculative.ngram_worker", "NGRAMWorker")})

ALIASES = frozenset({"NEXTN"})


@dataclass
class LaunchFacts:
    algorithm: str | None
    device: str | None
    enable_hisparse: bool
    # Read only if the cheaper checks pass.
    target_hf_config: Callable[[], Any]
    # None: a built-in algorithm whose worker class is not resolved yet (launcher).
    worker_class: type | None = None
    compat_problems: list[str] = field(default_factory=list)


# Exact classes, named so that no scheduler imports every algorithm's worker.
PHASED_WORKERS = frozenset(
    {
        ("sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2"),
        ("sglang.srt.speculative.standalone_worker_v2", "StandaloneWorkerV2"),
        ("sglang.srt.speculative.multi_layer_eagle_worker_v2", "MultiLayerEagleWorkerV2"),
        ("sglang.srt.speculative.dflash_worker", "DFlashWorker"),
        ("sglang.srt.speculative.frozen_kv_mtp_worker", "FrozenKVMTPWorker"),
    }
)


def is_model_less_worker(worker_class: type) -> bool:
    return (worker_class.__module__, worker_class.__qualname__) in MODEL_LESS_WORKERS


def worker_blocker(worker_class: type) -> str | None:
    """None for a worker phased here, or one with its own ``alloc_memory_pool`` and
    ``init_backends`` (ours inherited do not count: the subclass constructor may read pool
    sizes a cut constructor never provides)."""
    if (worker_class.__module__, worker_class.__qualname__) in PHASED_WORKERS:
        return None
    if is_model_less_worker(worker_class):
        return None
    from sglang_specinit import sglang_0_5_13
    from sglang_specinit.hooks import adapter_new_methods

    ours = set(adapter_new_methods(sglang_0_5_13))
    methods = [getattr(worker_class, name, None) for name in ("alloc_memory_pool", "init_backends")]
    if all(callable(m) and getattr(m, "__func__", m) not in ours for m in methods):
        return None
    return (
        f"{worker_class.__qualname__} (a custom speculative worker) does not implement "
        "alloc_memory_pool/init_backends itself, so it is built the stock way"
    )


def phasing_blocker(facts: LaunchFacts) -> str | None:
    """Why this launch keeps stock init; None: it is phased."""
    if facts.algorithm is None:
        return "not speculative"
    if facts.compat_problems:
        return "sglang-specinit is off in this process: " + "; ".join(facts.compat_problems)
    if facts.device not in PHASED_DEVICES:
        return f"device {facts.device!r} is not one of {PHASED_DEVICES}"
    if facts.enable_hisparse:
        return "--enable-hisparse builds its coordinator inside ModelRunner.initialize"
    from sglang.srt.configs.model_config import is_deepseek_v4

    if is_deepseek_v4(facts.target_hf_config()):
        # Stock's own (T+1)/T draft reservation beats a guess at the compressed pools.
        return "DeepSeek-V4 compressed KV pools are not priced by sglang-specinit"
    if facts.worker_class is not None:
        return worker_blocker(facts.worker_class)
    return None


def facts_from_server_args(server_args: Any) -> LaunchFacts:
    """The launcher's view, while ``ServerArgs.__post_init__`` runs (aliases unresolved)."""
    from sglang_specinit import compat

    algorithm = server_args.speculative_algorithm
    worker_class = None
    if algorithm is not None:
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        name = algorithm.upper()  # a built-in one's worker class is resolved later
        if name not in ALIASES and (name not in SpeculativeAlgorithm.__members__ or name == "NONE"):
            worker_class = SpeculativeAlgorithm.from_string(algorithm).create_worker(server_args)
    return LaunchFacts(
        algorithm=algorithm,
        device=server_args.device,
        enable_hisparse=bool(server_args.enable_hisparse),
        target_hf_config=lambda: server_args.get_model_config().hf_config,
        worker_class=worker_class,
        compat_problems=compat.problems_so_far(),
    )


def facts_from_scheduler(scheduler: Any) -> LaunchFacts:
    from sglang_specinit import compat

    server_args = scheduler.server_args
    if scheduler.spec_algorithm.is_none():
        return LaunchFacts(None, server_args.device, False, lambda: None)
    worker_class = scheduler.spec_algorithm.create_worker(server_args)
    # Other algorithms' workers are never imported, so their checks do not count.
    modules = [m for cls in worker_class.__mro__ if (m := cls.__module__).startswith("sglang")]
    core = [
        name
        for name in (compat.state().patches if compat.state() is not None else {})
        if not name.startswith("sglang.srt.speculative.")
    ]
    return LaunchFacts(
        algorithm=server_args.speculative_algorithm,
        device=server_args.device,
        enable_hisparse=bool(server_args.enable_hisparse),
        target_hf_config=lambda: scheduler.model_config.hf_config,
        worker_class=worker_class,
        compat_problems=compat.problems_for(core + modules),
    )
