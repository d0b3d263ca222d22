"""The draft workers in phases (0.5.13.x): each constructor stops once the draft is loaded (its
duplicate embed/lm_head bound); ``alloc_memory_pool`` and ``init_backends`` run the rest under
the constructor's contexts. One section and patch table per worker module."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

from sglang_specinit.patch_table import PatchTable
from sglang_specinit.pool_measure import attributes_restored
from sglang_specinit.sglang_0_5_13 import tp_worker
from sglang_specinit.sglang_0_5_13.model_runner import PROVISIONAL_SIZE
from sglang_specinit.sglang_0_5_13.state import (
    deferring_pools,
    run_until,
)
from sglang_specinit.sglang_0_5_13.tp_worker import pool_method

# EAGLE / EAGLE3 / NEXTN: the cut is at ``init_attention_backend``.
EAGLE_MODULE = "sglang.srt.speculative.eagle_worker_v2"
# create_worker's caller passes these by name.
DRAFT_WORKER_PARAMS = (
    "server_args", "gpu_id", "tp_rank", "dp_rank", "moe_ep_rank", "attn_cp_rank",
    "moe_dp_rank", "nccl_port", "target_worker",
)  # fmt: skip
eagle_patch = PatchTable(EAGLE_MODULE)


def _eagle_module() -> Any:
    return importlib.import_module(EAGLE_MODULE)


@contextlib.contextmanager
def _moe_contexts() -> Iterator[None]:
    mod = _eagle_module()
    with mod.speculative_moe_backend_context(), mod.speculative_moe_a2a_backend_context():
        yield


@eagle_patch.around("EagleDraftWorker.__init__", params=DRAFT_WORKER_PARAMS)
@eagle_patch.calls("EagleDraftWorker.init_attention_backend", "EagleDraftWorker.init_cuda_graphs")
def draft_worker_init(original: Any, self: Any, *args: Any, **kwargs: Any) -> None:
    if not deferring_pools():
        return original(self, *args, **kwargs)
    construct_until(self, "init_attention_backend", original, args, kwargs)


def construct_until(
    self: Any, cut_at: str | tuple[str, ...], original: Any, args: tuple, kwargs: dict
) -> None:
    server_args = kwargs.get("server_args", args[0] if args else None)
    # A cut draft constructor never reaches its own restore of ``disable_cuda_graph``.
    with attributes_restored(server_args, ("disable_cuda_graph",)):
        reached = run_until(self, cut_at, lambda: original(self, *args, **kwargs))
    if not reached:
        raise RuntimeError(
            f"sglang-specinit: {type(self).__name__}.__init__ never reached {cut_at}; this "
            "sglang build differs from 0.5.13.x. Set SGLANG_SPECINIT_DISABLE=1."
        )


def delegate_pools(owner: Any, inner: Any, config: Any, req_pool: Any, allocator: Any) -> None:
    """Keep the shared pools on ``owner`` and have ``inner`` allocate its own."""
    owner.req_to_token_pool = req_pool
    owner.token_to_kv_pool_allocator = allocator
    inner.alloc_memory_pool(
        memory_pool_config=config, req_to_token_pool=req_pool, token_to_kv_pool_allocator=allocator
    )


@contextlib.contextmanager
def _construction_contexts(draft: Any) -> Iterator[None]:
    mod = _eagle_module()
    if draft.server_args.enable_dp_attention and draft.speculative_algorithm.is_eagle3():
        tp_context = mod.draft_tp_context(mod.get_attention_tp_group())
    else:
        tp_context = mod.empty_context()
    with tp_context, _moe_contexts():
        yield


@eagle_patch.adds("EagleDraftWorker", "alloc_memory_pool")
@pool_method
def draft_worker_alloc_memory_pool(self: Any, config: Any, req_pool: Any, allocator: Any) -> None:
    with _construction_contexts(self):
        delegate_pools(self, self.draft_worker, config, req_pool, allocator)


@eagle_patch.adds("EagleDraftWorker", "init_backends")
@eagle_patch.calls(
    "draft_tp_context",
    "empty_context",
    "get_attention_tp_group",
    "speculative_moe_backend_context",
    "speculative_moe_a2a_backend_context",
    "_get_plan_stream",
)
def draft_worker_init_backends(self: Any) -> None:
    # The draft runner's backend, as the draft TpModelWorker's construction would build it.
    with _construction_contexts(self):
        self.draft_worker.init_backends()
    with self.draft_tp_context(self.draft_runner.tp_group), _moe_contexts():
        self.init_attention_backend()
        # Breakable graphs are captured after init_lm_head so they see the bound embed/head.
        if self.server_args.enable_breakable_cuda_graph:
            self.draft_runner.init_piecewise_cuda_graphs(force_for_draft_worker=True)
        self.init_cuda_graphs()
    if (canary := self.draft_runner.canary_manager) is not None:
        canary.mark_init_finished()
    self.plan_stream, self.plan_stream_ctx = _eagle_module()._get_plan_stream(self.device)


@eagle_patch.around("EAGLEWorkerV2.__init__", params=DRAFT_WORKER_PARAMS)
def worker_init(original: Any, self: Any, *args: Any, **kwargs: Any) -> None:
    """The adaptive controller needs graphs, so ``init_backends`` builds it."""
    if not deferring_pools():
        return original(self, *args, **kwargs)
    server_args = kwargs.get("server_args", args[0] if args else None)
    adaptive = server_args.speculative_adaptive
    server_args.speculative_adaptive = False
    try:
        original(self, *args, **kwargs)
    finally:
        server_args.speculative_adaptive = adaptive
    self._specinit_adaptive = adaptive


@eagle_patch.adds("EAGLEWorkerV2", "alloc_memory_pool")
@pool_method
def worker_alloc_memory_pool(self: Any, config: Any, req_pool: Any, allocator: Any) -> None:
    delegate_pools(self, self._draft_worker, config, req_pool, allocator)  # also multi-layer's


@eagle_patch.adds("EAGLEWorkerV2", "init_backends")
def worker_init_backends(self: Any) -> None:
    self._draft_worker.init_backends()
    if getattr(self, "_specinit_adaptive", False):
        _register_adaptive_controller(self)


@eagle_patch.calls("AdaptiveController", "SpecRuntimeState")
def _register_adaptive_controller(worker: Any) -> None:
    mod = _eagle_module()
    draft = worker._draft_worker
    target_runner = worker._target_worker.model_runner
    server_args = worker.server_args
    worker.adaptive_controller = mod.AdaptiveController(
        worker, config_path=server_args.speculative_adaptive_config
    )
    with draft.draft_tp_context(draft.draft_runner.tp_group), _moe_contexts():
        worker.adaptive_controller.register(
            mod.SpecRuntimeState(
                speculative_num_steps=worker.speculative_num_steps,
                speculative_num_draft_tokens=worker.speculative_num_draft_tokens,
                draft_attn_backend=draft.draft_attn_backend,
                cuda_graph_runner=draft.cuda_graph_runner,
                target_attn_backend=target_runner.attn_backend,
                target_graph_runner=target_runner.graph_runner,
                draft_extend_attn_backend=draft.draft_extend_attn_backend,
                cuda_graph_runner_for_draft_extend=draft.cuda_graph_runner_for_draft_extend,
            )
        )
        worker.adaptive_controller.init_states(
            cuda_graph_bs=None if server_args.disable_cuda_graph else server_args.cuda_graph_bs
        )


# The cut skips the constructor's ``tree_mask_mode = TreeMaskMode.FULL_MASK``; phase 4's
# init_attention_backend sets it from the same enum.
eagle_patch.requires("TreeMaskMode")


# STANDALONE: a full small LM that keeps its own embed/lm_head, all its weights counted. The
# phases keep the constructor's contexts (the MoE backend context only: no a2a, no breakable
# graphs, no canary mark).
standalone_patch = PatchTable("sglang.srt.speculative.standalone_worker_v2")


# Cut as EAGLE's draft is, at init_attention_backend (phase 4 calls it).
standalone_patch.requires("StandaloneDraftWorker.init_attention_backend")
standalone_patch.around("StandaloneDraftWorker.__init__", params=DRAFT_WORKER_PARAMS)(
    draft_worker_init
)


@standalone_patch.adds("StandaloneDraftWorker", "alloc_memory_pool")
@pool_method
def standalone_alloc_memory_pool(self: Any, config: Any, req_pool: Any, allocator: Any) -> None:
    with _eagle_module().empty_context():
        delegate_pools(self, self.draft_worker, config, req_pool, allocator)


@standalone_patch.adds("StandaloneDraftWorker", "init_backends")
def standalone_draft_worker_init_backends(self: Any) -> None:
    mod = _eagle_module()
    with mod.empty_context():
        self.draft_worker.init_backends()
    with self.draft_tp_context(self.draft_runner.tp_group), mod.speculative_moe_backend_context():
        self.init_attention_backend()
        self.init_cuda_graphs()
    self.plan_stream, self.plan_stream_ctx = mod._get_plan_stream(self.device)


# Inherits the phase methods added to EAGLEWorkerV2 above.
standalone_patch.requires("StandaloneWorkerV2")


# Multi-layer EAGLE (MTP): one pool per draft runner, each at its own geometry; the per-request
# ``req_to_hidden_states_pool`` is shaped by the request pool, so the pool phase allocates and
# charges it. The embed/lm_head binding runs at the cut: no copy is left when the target is sized.
MULTI_LAYER_MODULE = "sglang.srt.speculative.multi_layer_eagle_worker_v2"
MULTI_LAYER_DRAFT = "MultiLayerEagleDraftWorker"
MULTI_LAYER_WORKER = "MultiLayerEagleWorkerV2"
multi_layer_patch = PatchTable(MULTI_LAYER_MODULE)


def _multi_layer_module() -> Any:
    return importlib.import_module(MULTI_LAYER_MODULE)


@contextlib.contextmanager
def _multi_layer_contexts() -> Iterator[None]:
    mod = _multi_layer_module()
    with mod.empty_context(), mod.speculative_moe_backend_context():
        yield


def hidden_state_row_bytes(draft: Any) -> int:
    import torch

    config = draft.model_config
    element = torch.empty((), dtype=config.dtype).element_size()
    return (draft.speculative_num_steps - 1) * config.hidden_size * element


@multi_layer_patch.around(f"{MULTI_LAYER_DRAFT}.__init__", params=DRAFT_WORKER_PARAMS)
@multi_layer_patch.calls(f"{MULTI_LAYER_DRAFT}.init_lm_head")  # the cut, then called right away
def multi_layer_draft_worker_init(original: Any, self: Any, *args: Any, **kwargs: Any) -> None:
    if not deferring_pools():
        return original(self, *args, **kwargs)
    construct_until(self, "init_lm_head", original, args, kwargs)
    self.init_lm_head()


@multi_layer_patch.adds(MULTI_LAYER_DRAFT, "alloc_memory_pool")
@pool_method
def multi_layer_alloc_memory_pool(self: Any, config: Any, req_pool: Any, allocator: Any) -> None:
    import torch

    with _multi_layer_contexts():
        delegate_pools(self, self.draft_worker, config, req_pool, allocator)
    # Rows mirror req_to_token so a request's pool index addresses its hidden states.
    self.req_to_hidden_states_pool = torch.empty(
        (
            req_pool.req_to_token.shape[0],
            self.speculative_num_steps - 1,
            self.model_config.hidden_size,
        ),
        dtype=self.model_config.dtype,
        device=self.device,
    )


@multi_layer_patch.adds(MULTI_LAYER_DRAFT, "init_backends")
@multi_layer_patch.calls(
    f"{MULTI_LAYER_DRAFT}.init_attention_backend",
    f"{MULTI_LAYER_DRAFT}.init_cuda_graphs",
    "empty_context",
    "draft_tp_context",
    "speculative_moe_backend_context",
    "TreeMaskMode",
    "_get_plan_stream",
)
def multi_layer_draft_worker_init_backends(self: Any) -> None:
    mod = _multi_layer_module()
    with _multi_layer_contexts():
        self.draft_worker.init_backends()
    self.draft_tp_context = (
        mod.draft_tp_context if self.server_args.enable_dp_attention else mod.empty_context
    )
    with (
        self.draft_tp_context(self.draft_runner_list[0].tp_group),
        mod.speculative_moe_backend_context(),
    ):
        self.init_attention_backend()
        self.init_cuda_graphs()
    self.tree_mask_mode = mod.TreeMaskMode.FULL_MASK
    self.plan_stream, self.plan_stream_ctx = mod._get_plan_stream(self.device)


# The worker only delegates to its draft worker, as EAGLEWorkerV2 does.
multi_layer_patch.adds(MULTI_LAYER_WORKER, "alloc_memory_pool")(worker_alloc_memory_pool)
multi_layer_patch.adds(MULTI_LAYER_WORKER, "init_backends")(worker_init_backends)


# DFLASH: no constructor hook. Stock prices the draft as the target's cell scaled by
# ``(T + D) / T``; here the draft pool is priced at its own geometry. The pool and backend phases
# run under the draft's global server args, as its construction did.
DFLASH_MODULE = "sglang.srt.speculative.dflash_worker"
SERVER_ARGS_MODULE = "sglang.srt.server_args"
dflash_patch = PatchTable(DFLASH_MODULE)


@contextlib.contextmanager
@dflash_patch.calls(
    "get_global_server_args", "set_global_server_args_for_scheduler", module=SERVER_ARGS_MODULE
)
def _draft_global_server_args(worker: Any) -> Iterator[None]:
    from sglang.srt.server_args import (
        get_global_server_args,
        set_global_server_args_for_scheduler,
    )

    saved = get_global_server_args()
    set_global_server_args_for_scheduler(worker.draft_worker.server_args)
    try:
        yield
    finally:
        set_global_server_args_for_scheduler(saved)


@dflash_patch.adds("DFlashWorker", "alloc_memory_pool")
@pool_method
def dflash_alloc_memory_pool(self: Any, config: Any, req_pool: Any, allocator: Any) -> None:
    shared_req_pool = None if self.use_compact_draft_cache else req_pool
    with _draft_global_server_args(self):
        self.draft_worker.alloc_memory_pool(
            memory_pool_config=config,
            req_to_token_pool=shared_req_pool,
            token_to_kv_pool_allocator=allocator,
        )


@dflash_patch.adds("DFlashWorker", "init_backends")
def dflash_init_backends(self: Any) -> None:
    with _draft_global_server_args(self):
        self.draft_worker.init_backends()


# Frozen-KV MTP: the draft reads the target's KV cache, so its constructor needs the target pool.
# The draft loads with the others, binds the target pool in phase 3, and is charged exactly its
# weights and its 64-token stand-in pool.
FROZEN_KV_MODULE = "sglang.srt.speculative.frozen_kv_mtp_worker"
frozen_kv_patch = PatchTable(FROZEN_KV_MODULE)


def _frozen_kv_module() -> Any:
    return importlib.import_module(FROZEN_KV_MODULE)


@contextlib.contextmanager
def _frozen_kv_contexts(tp_context: Any) -> Iterator[None]:
    mod = _frozen_kv_module()
    with (
        tp_context,
        mod.speculative_moe_backend_context(),
        mod.speculative_moe_a2a_backend_context(),
    ):
        yield


@frozen_kv_patch.around("FrozenKVMTPWorker.__init__", params=DRAFT_WORKER_PARAMS)
@frozen_kv_patch.calls(
    "FrozenKVMTPWorker._bind_kv_context",
    "FrozenKVMTPWorker._init_draft_attn_backend",
    "FrozenKVMTPWorker.init_cuda_graphs",
    "MemoryPoolConfig",
)
def frozen_kv_init(original: Any, self: Any, *args: Any, **kwargs: Any) -> None:
    if not deferring_pools():
        return original(self, *args, **kwargs)
    target_worker = kwargs.get("target_worker", args[-1] if args else None)
    target_runner = target_worker.model_runner
    # The constructor copies the target's request count before any pool exists.
    target_runner.memory_pool_config = _frozen_kv_module().MemoryPoolConfig(
        max_total_num_tokens=PROVISIONAL_SIZE, max_running_requests=PROVISIONAL_SIZE
    )
    try:
        construct_until(
            self, ("_bind_kv_context", "_init_draft_attn_backend"), original, args, kwargs
        )
    finally:
        target_runner.memory_pool_config = None


@frozen_kv_patch.adds("FrozenKVMTPWorker", "alloc_memory_pool")
@pool_method
def frozen_kv_alloc_memory_pool(self: Any, config: Any, req_pool: Any, allocator: Any) -> None:
    self.memory_pool_config.max_running_requests = config.max_running_requests
    self.req_to_token_pool = req_pool
    self.token_to_kv_pool_allocator = allocator
    with _frozen_kv_contexts(_frozen_kv_module().empty_context()):
        tp_worker.alloc_memory_pool(self, self.memory_pool_config, req_pool, allocator)
    self.kv_context = None
    if hasattr(self.draft_model_runner.model, "bind_frozen_kv_context"):
        self._bind_kv_context()


@frozen_kv_patch.adds("FrozenKVMTPWorker", "init_backends")
@frozen_kv_patch.calls(
    "empty_context",
    "draft_tp_context",
    "speculative_moe_backend_context",
    "speculative_moe_a2a_backend_context",
)
def frozen_kv_init_backends(self: Any) -> None:
    mod = _frozen_kv_module()
    with _frozen_kv_contexts(mod.empty_context()):
        tp_worker.init_backends(self)
    self.draft_tp_context = (
        mod.draft_tp_context if self.server_args.enable_dp_attention else mod.empty_context
    )
    self.draft_attn_backend = self._init_draft_attn_backend()
    self.draft_model_runner.draft_attn_backend = self.draft_attn_backend
    self.cuda_graph_runner = None
    with _frozen_kv_contexts(self.draft_tp_context(self.draft_model_runner.tp_group)):
        self.init_cuda_graphs()


_PATCHES = (eagle_patch, standalone_patch, multi_layer_patch, dflash_patch, frozen_kv_patch)
HOOKS, NEW_METHODS, REQUIRES = (
    tuple(entry for patch in _PATCHES for entry in patch.tables()[kind]) for kind in range(3)
)
