"""Multi-layer EAGLE (MTP) workers in phases (0.5.13 / 0.5.13.post1).

Each of the ``speculative_num_steps`` draft runners has a pool of its own, priced at its own
geometry; the per-request ``req_to_hidden_states_pool`` is shaped by the request pool, so it is
allocated in the pool phase and charged to the budget. The embed/lm_head binding runs right at
the cut, so the copies are freed before the target pool is sized.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sglang_specinit.patch_table import PatchTable
from sglang_specinit.sglang_0_5_13.eagle import (
    DRAFT_WORKER_PARAMS,
    alloc_draft_tp_worker,
    construct_until,
    worker_alloc_memory_pool,
    worker_init_backends,
)
from sglang_specinit.sglang_0_5_13.state import deferring_pools

MODULE = "sglang.srt.speculative.multi_layer_eagle_worker_v2"
DRAFT = "MultiLayerEagleDraftWorker"
WORKER = "MultiLayerEagleWorkerV2"
patch = PatchTable(MODULE)


def _module() -> Any:
    import sglang.srt.speculative.multi_layer_eagle_worker_v2 as multi_layer

    return multi_layer


@contextlib.contextmanager
def _construction_contexts() -> Iterator[None]:
    mod = _module()
    with mod.empty_context(), mod.speculative_moe_backend_context():
        yield


def hidden_state_row_bytes(draft: Any) -> int:
    import torch

    config = draft.model_config
    element = torch.empty((), dtype=config.dtype).element_size()
    return (draft.speculative_num_steps - 1) * config.hidden_size * element


@patch.around(f"{DRAFT}.__init__", params=DRAFT_WORKER_PARAMS)
@patch.calls(f"{DRAFT}.init_lm_head")  # the cut, then called right away
def draft_worker_init(original: Any, self: Any, *args: Any, **kwargs: Any) -> None:
    if not deferring_pools():
        return original(self, *args, **kwargs)
    construct_until(self, "init_lm_head", original, args, kwargs)
    self.init_lm_head()


@patch.adds(DRAFT, "alloc_memory_pool")
def draft_worker_alloc_memory_pool(
    self: Any,
    memory_pool_config: Any = None,
    req_to_token_pool: Any = None,
    token_to_kv_pool_allocator: Any = None,
) -> None:
    import torch

    alloc_draft_tp_worker(
        self,
        _construction_contexts(),
        memory_pool_config,
        req_to_token_pool,
        token_to_kv_pool_allocator,
    )
    # Rows mirror req_to_token so a request's pool index addresses its hidden states.
    self.req_to_hidden_states_pool = torch.empty(
        (
            req_to_token_pool.req_to_token.shape[0],
            self.speculative_num_steps - 1,
            self.model_config.hidden_size,
        ),
        dtype=self.model_config.dtype,
        device=self.device,
    )


@patch.adds(DRAFT, "init_backends")
@patch.calls(
    f"{DRAFT}.init_attention_backend",
    f"{DRAFT}.init_cuda_graphs",
    "empty_context",
    "draft_tp_context",
    "speculative_moe_backend_context",
    "TreeMaskMode",
    "_get_plan_stream",
)
def draft_worker_init_backends(self: Any) -> None:
    mod = _module()
    with _construction_contexts():
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
patch.adds(WORKER, "alloc_memory_pool")(worker_alloc_memory_pool)
patch.adds(WORKER, "init_backends")(worker_init_backends)

HOOKS, NEW_METHODS, REQUIRES = patch.tables()
