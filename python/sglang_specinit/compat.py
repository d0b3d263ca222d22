"""Which sglang releases the patch is for, and an all-or-nothing check before patching.

Every hooked target must exist with the parameters the hook was written against, every method
the phases call must exist, and every phase method the plugin adds must be absent. If anything
is off nothing is patched: a half-patched SGLang would be worse than stock.
"""

from __future__ import annotations

import inspect
import pkgutil
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

SUPPORTED_VERSIONS = ("0.5.13", "0.5.13.post1")
FIXED_UPSTREAM = (0, 5, 14)

# Every speculative worker constructor takes these (create_worker's caller passes them by name).
DRAFT_WORKER_PARAMS = (
    "server_args", "gpu_id", "tp_rank", "dp_rank", "moe_ep_rank", "attn_cp_rank",
    "moe_dp_rank", "nccl_port", "target_worker",
)  # fmt: skip

# target -> parameter names (after self) the hook relies on.
EXPECTED_SIGNATURES: dict[str, tuple[str, ...]] = {
    "sglang.srt.managers.scheduler.Scheduler.init_model_worker": (),
    "sglang.srt.managers.tp_worker.TpModelWorker.__init__": (
        "server_args",
        "gpu_id",
        "tp_rank",
        "moe_ep_rank",
        "pp_rank",
        "attn_cp_rank",
        "moe_dp_rank",
        "dp_rank",
        "nccl_port",
        "is_draft_worker",
        "req_to_token_pool",
        "token_to_kv_pool_allocator",
        "memory_pool_config",
        "is_multi_layer_eagle",
    ),
    "sglang.srt.model_executor.model_runner.ModelRunner.initialize": ("pre_model_load_memory",),
    "sglang.srt.model_executor.model_runner_kv_cache_mixin.ModelRunnerKVCacheMixin."
    "_resolve_memory_pool_config": ("pre_model_load_memory",),
    "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker.__init__": DRAFT_WORKER_PARAMS,
    "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2.__init__": DRAFT_WORKER_PARAMS,
    "sglang.srt.server_args.ServerArgs._handle_gpu_memory_settings": ("gpu_mem",),
    "sglang.srt.arg_groups.speculative_hook.handle_speculative_decoding": (),
    "sglang.srt.server_args.ServerArgs.check_server_args": (),
    **{
        f"sglang.srt.speculative.{target}.__init__": DRAFT_WORKER_PARAMS
        for target in (
            "standalone_worker_v2.StandaloneDraftWorker",
            "multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker",
            "frozen_kv_mtp_worker.FrozenKVMTPWorker",
        )
    },
}

# Methods and module attributes the phases call in their new order.
CALLED: tuple[str, ...] = (
    "sglang.srt.managers.scheduler.Scheduler.init_tp_model_worker",
    "sglang.srt.managers.scheduler.Scheduler.maybe_init_draft_worker",
    "sglang.srt.managers.tp_worker.TpModelWorker.get_memory_pool",
    "sglang.srt.model_executor.model_runner.ModelRunner.init_memory_pool",
    "sglang.srt.model_executor.model_runner.ModelRunner._profile_available_bytes",
    "sglang.srt.model_executor.model_runner.ModelRunner._apply_token_constraints",
    "sglang.srt.model_executor.model_runner.ModelRunner._resolve_max_num_reqs",
    "sglang.srt.model_executor.model_runner.ModelRunner.maybe_init_ngram_embedding",
    "sglang.srt.model_executor.model_runner.ModelRunner.init_routed_experts_capturer",
    "sglang.srt.model_executor.model_runner.ModelRunner.init_indexer_capturer",
    "sglang.srt.model_executor.model_runner.ModelRunner.init_aux_hidden_state_capture",
    "sglang.srt.model_executor.model_runner.ModelRunner.init_cublas",
    "sglang.srt.model_executor.model_runner.ModelRunner.init_attention_backend",
    "sglang.srt.model_executor.model_runner.ModelRunner.kernel_warmup",
    "sglang.srt.model_executor.model_runner.ModelRunner."
    "_pre_initialize_flashinfer_allreduce_workspace",
    "sglang.srt.model_executor.model_runner.ModelRunner.init_device_graphs",
    "sglang.srt.model_executor.model_runner.ModelRunner.init_piecewise_cuda_graphs",
    "sglang.srt.model_executor.model_runner.ModelRunner.prealloc_symmetric_memory_pool",
    "sglang.srt.model_executor.model_runner.install_canary",
    "sglang.srt.model_executor.model_runner.register_forward_hooks",
    "sglang.srt.model_executor.pool_configurator.create_memory_pool_configurator",
    "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker.init_attention_backend",
    "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker.init_cuda_graphs",
    "sglang.srt.speculative.eagle_worker_v2.draft_tp_context",
    "sglang.srt.speculative.eagle_worker_v2.empty_context",
    "sglang.srt.speculative.eagle_worker_v2.get_attention_tp_group",
    "sglang.srt.speculative.eagle_worker_v2.speculative_moe_backend_context",
    "sglang.srt.speculative.eagle_worker_v2.speculative_moe_a2a_backend_context",
    "sglang.srt.speculative.eagle_worker_v2._get_plan_stream",
    "sglang.srt.speculative.eagle_worker_v2.AdaptiveController",
    "sglang.srt.speculative.eagle_worker_v2.SpecRuntimeState",
    "sglang.srt.speculative.eagle_worker_v2.TreeMaskMode",
    "sglang.srt.speculative.standalone_worker_v2.StandaloneDraftWorker.init_attention_backend",
    "sglang.srt.speculative.standalone_worker_v2.StandaloneWorkerV2",
    "sglang.srt.speculative.multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker.init_lm_head",
    "sglang.srt.speculative.multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker."
    "init_attention_backend",
    "sglang.srt.speculative.multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker."
    "init_cuda_graphs",
    "sglang.srt.speculative.multi_layer_eagle_worker_v2.MultiLayerEagleWorkerV2",
    "sglang.srt.speculative.multi_layer_eagle_worker_v2.empty_context",
    "sglang.srt.speculative.multi_layer_eagle_worker_v2.draft_tp_context",
    "sglang.srt.speculative.multi_layer_eagle_worker_v2.speculative_moe_backend_context",
    "sglang.srt.speculative.multi_layer_eagle_worker_v2.TreeMaskMode",
    "sglang.srt.speculative.multi_layer_eagle_worker_v2._get_plan_stream",
    "sglang.srt.speculative.dflash_worker.DFlashWorker",
    "sglang.srt.server_args.get_global_server_args",
    "sglang.srt.server_args.set_global_server_args_for_scheduler",
    "sglang.srt.speculative.frozen_kv_mtp_worker.FrozenKVMTPWorker._bind_kv_context",
    "sglang.srt.speculative.frozen_kv_mtp_worker.FrozenKVMTPWorker._init_draft_attn_backend",
    "sglang.srt.speculative.frozen_kv_mtp_worker.FrozenKVMTPWorker.init_cuda_graphs",
    "sglang.srt.speculative.frozen_kv_mtp_worker.MemoryPoolConfig",
    "sglang.srt.speculative.frozen_kv_mtp_worker.empty_context",
    "sglang.srt.speculative.frozen_kv_mtp_worker.draft_tp_context",
    "sglang.srt.speculative.frozen_kv_mtp_worker.speculative_moe_backend_context",
    "sglang.srt.speculative.frozen_kv_mtp_worker.speculative_moe_a2a_backend_context",
)


@dataclass(frozen=True)
class Decision:
    patch: bool
    sglang_version: str | None
    reason: str
    # True when stepping aside is the right thing (upstream already has the fix).
    upstream_fixed: bool = False


def _release_tuple(ver: str) -> tuple[int, ...]:
    parts = []
    for piece in ver.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def installed_sglang_version() -> str | None:
    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def decide_for_version(ver: str | None) -> Decision:
    if ver is None:
        return Decision(False, None, "sglang is not installed")
    if _release_tuple(ver) >= FIXED_UPSTREAM:
        return Decision(
            False, ver, f"sglang {ver} already has the phased init (upstream PR #23862)", True
        )
    if ver not in SUPPORTED_VERSIONS:
        return Decision(
            False, ver, f"sglang {ver} is not one of the supported {', '.join(SUPPORTED_VERSIONS)}"
        )
    return Decision(True, ver, "supported")


def signature_problems(
    expected: dict[str, tuple[str, ...]] = EXPECTED_SIGNATURES,
    called: tuple[str, ...] = CALLED,
    new_methods: tuple[tuple[str, str], ...] = (),
) -> list[str]:
    """Everything that differs from what the phases were written against (empty: all fine)."""
    problems = []
    for target, params in expected.items():
        try:
            fn = pkgutil.resolve_name(target)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{target} is missing ({exc.__class__.__name__}: {exc})")
            continue
        names = tuple(inspect.signature(fn).parameters)[1:]
        if names[: len(params)] != params:
            problems.append(f"{target}{names} does not take {params}")
    for target in called:
        try:
            pkgutil.resolve_name(target)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{target} is missing ({exc.__class__.__name__})")
    for class_path, name in new_methods:
        try:
            cls = pkgutil.resolve_name(class_path)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{class_path} is missing ({exc.__class__.__name__})")
            continue
        if name in vars(cls):
            problems.append(f"{class_path}.{name} already exists")
    return problems


def phased_worker_classes() -> tuple[type, ...]:
    """Speculative worker classes whose init runs in phases."""
    from sglang.srt.speculative.dflash_worker import DFlashWorker
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
    from sglang.srt.speculative.frozen_kv_mtp_worker import FrozenKVMTPWorker
    from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleWorkerV2
    from sglang.srt.speculative.standalone_worker_v2 import StandaloneWorkerV2

    return (
        EAGLEWorkerV2,
        StandaloneWorkerV2,
        MultiLayerEagleWorkerV2,
        DFlashWorker,
        FrozenKVMTPWorker,
    )


# Speculative workers without a draft model, built in the pool phase. Named rather than
# imported: ngram_worker imports sgl_kernel at module level, which only CUDA builds have.
MODEL_LESS_WORKERS = frozenset({("sglang.srt.speculative.ngram_worker", "NGRAMWorker")})


def is_model_less_worker(worker_class: type) -> bool:
    return (worker_class.__module__, worker_class.__qualname__) in MODEL_LESS_WORKERS
