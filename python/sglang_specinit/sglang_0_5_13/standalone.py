"""STANDALONE draft workers in phases (0.5.13 / 0.5.13.post1): a full small LM that keeps its
own embed/lm_head, all its weights counted. The phases keep the constructor's contexts (the MoE
backend context only: no a2a, no breakable graphs, no canary mark).
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.patch_table import PatchTable
from sglang_specinit.sglang_0_5_13.eagle import (
    DRAFT_WORKER_PARAMS,
    _eagle_module,
    alloc_draft_tp_worker,
    construct_until,
)
from sglang_specinit.sglang_0_5_13.state import deferring_pools

MODULE = "sglang.srt.speculative.standalone_worker_v2"
patch = PatchTable(MODULE)


@patch.around("StandaloneDraftWorker.__init__", params=DRAFT_WORKER_PARAMS)
@patch.calls("StandaloneDraftWorker.init_attention_backend")  # the cut; phase 4 calls it
def draft_worker_init(original: Any, self: Any, *args: Any, **kwargs: Any) -> None:
    if not deferring_pools():
        return original(self, *args, **kwargs)
    construct_until(self, "init_attention_backend", original, args, kwargs)


@patch.adds("StandaloneDraftWorker", "alloc_memory_pool")
def draft_worker_alloc_memory_pool(
    self: Any,
    memory_pool_config: Any = None,
    req_to_token_pool: Any = None,
    token_to_kv_pool_allocator: Any = None,
) -> None:
    alloc_draft_tp_worker(
        self,
        _eagle_module().empty_context(),
        memory_pool_config,
        req_to_token_pool,
        token_to_kv_pool_allocator,
    )


@patch.adds("StandaloneDraftWorker", "init_backends")
def draft_worker_init_backends(self: Any) -> None:
    mod = _eagle_module()
    with mod.empty_context():
        self.draft_worker.init_backends()
    with self.draft_tp_context(self.draft_runner.tp_group), mod.speculative_moe_backend_context():
        self.init_attention_backend()
        self.init_cuda_graphs()
    self.plan_stream, self.plan_stream_ctx = mod._get_plan_stream(self.device)


# Inherits the phase methods eagle.py adds to EAGLEWorkerV2.
patch.requires("StandaloneWorkerV2")

HOOKS, NEW_METHODS, REQUIRES = patch.tables()
