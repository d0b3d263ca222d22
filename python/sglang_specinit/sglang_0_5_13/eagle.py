"""EAGLE / EAGLE3 / NEXTN draft workers in phases (0.5.13 / 0.5.13.post1).

The ``EagleDraftWorker`` constructor is stopped at ``init_attention_backend``: the draft is
loaded and its duplicate embed/lm_head already bound, so that memory is free before the target
pool is sized. Pools and backends follow in their own phases, under the contexts the constructor
used, entered one after the other.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from sglang_specinit.patch_table import PatchTable
from sglang_specinit.sglang_0_5_13.state import (
    deferring_pools,
    preserved_cuda_graph_flag,
    run_until,
)

logger = logging.getLogger(__name__)

MODULE = "sglang.srt.speculative.eagle_worker_v2"
# create_worker's caller passes these by name.
DRAFT_WORKER_PARAMS = (
    "server_args", "gpu_id", "tp_rank", "dp_rank", "moe_ep_rank", "attn_cp_rank",
    "moe_dp_rank", "nccl_port", "target_worker",
)  # fmt: skip
patch = PatchTable(MODULE)


def _eagle_module() -> Any:
    import sglang.srt.speculative.eagle_worker_v2 as eagle_worker_v2

    return eagle_worker_v2


@contextlib.contextmanager
def _moe_contexts() -> Iterator[None]:
    mod = _eagle_module()
    with mod.speculative_moe_backend_context(), mod.speculative_moe_a2a_backend_context():
        yield


def _construction_tp_context(draft: Any) -> Any:
    mod = _eagle_module()
    if draft.server_args.enable_dp_attention and draft.speculative_algorithm.is_eagle3():
        return mod.draft_tp_context(mod.get_attention_tp_group())
    return mod.empty_context()


@patch.around("EagleDraftWorker.__init__", params=DRAFT_WORKER_PARAMS)
@patch.calls("EagleDraftWorker.init_attention_backend", "EagleDraftWorker.init_cuda_graphs")
def draft_worker_init(original: Any, self: Any, *args: Any, **kwargs: Any) -> None:
    if not deferring_pools():
        return original(self, *args, **kwargs)
    construct_until(self, "init_attention_backend", original, args, kwargs)


def construct_until(
    self: Any, cut_at: str | tuple[str, ...], original: Any, args: tuple, kwargs: dict
) -> None:
    server_args = kwargs.get("server_args", args[0] if args else None)
    with preserved_cuda_graph_flag(server_args):
        reached = run_until(self, cut_at, lambda: original(self, *args, **kwargs))
    if not reached:
        raise RuntimeError(
            f"sglang-specinit: {type(self).__name__}.__init__ never reached {cut_at}; this "
            "sglang build differs from 0.5.13.x. Set SGLANG_SPECINIT_DISABLE=1."
        )


def alloc_draft_tp_worker(
    draft: Any,
    contexts: Any,
    memory_pool_config: Any,
    req_to_token_pool: Any,
    token_to_kv_pool_allocator: Any,
) -> None:
    draft.req_to_token_pool = req_to_token_pool
    draft.token_to_kv_pool_allocator = token_to_kv_pool_allocator
    with contexts:
        draft.draft_worker.alloc_memory_pool(
            memory_pool_config=memory_pool_config,
            req_to_token_pool=req_to_token_pool,
            token_to_kv_pool_allocator=token_to_kv_pool_allocator,
        )


@contextlib.contextmanager
def _construction_contexts(draft: Any) -> Iterator[None]:
    with _construction_tp_context(draft), _moe_contexts():
        yield


@patch.adds("EagleDraftWorker", "alloc_memory_pool")
def draft_worker_alloc_memory_pool(
    self: Any,
    memory_pool_config: Any = None,
    req_to_token_pool: Any = None,
    token_to_kv_pool_allocator: Any = None,
) -> None:
    alloc_draft_tp_worker(
        self,
        _construction_contexts(self),
        memory_pool_config,
        req_to_token_pool,
        token_to_kv_pool_allocator,
    )


@patch.adds("EagleDraftWorker", "init_backends")
@patch.calls(
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


@patch.around("EAGLEWorkerV2.__init__", params=DRAFT_WORKER_PARAMS)
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


@patch.adds("EAGLEWorkerV2", "alloc_memory_pool")
def worker_alloc_memory_pool(  # also MultiLayerEagleWorkerV2's
    self: Any,
    memory_pool_config: Any = None,
    req_to_token_pool: Any = None,
    token_to_kv_pool_allocator: Any = None,
) -> None:
    self.req_to_token_pool = req_to_token_pool
    self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
    self._draft_worker.alloc_memory_pool(
        memory_pool_config=memory_pool_config,
        req_to_token_pool=req_to_token_pool,
        token_to_kv_pool_allocator=token_to_kv_pool_allocator,
    )


@patch.adds("EAGLEWorkerV2", "init_backends")
def worker_init_backends(self: Any) -> None:
    self._draft_worker.init_backends()
    if getattr(self, "_specinit_adaptive", False):
        _register_adaptive_controller(self)


@patch.calls("AdaptiveController", "SpecRuntimeState")
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
patch.requires("TreeMaskMode")

HOOKS, NEW_METHODS, REQUIRES = patch.tables()
