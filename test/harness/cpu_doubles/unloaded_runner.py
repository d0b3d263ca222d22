"""A ModelRunner whose weights were never loaded, for pricing pools with SGLang's own code."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from unittest import mock

# The attributes unloaded_runner sets (compared with a live runner's by the tests).
DERIVED_ATTRS = tuple(
    "page_size is_hybrid_swa is_hybrid_swa_compress use_mla_backend enable_hisparse"
    " is_draft_worker start_layer end_layer num_effective_layers kv_cache_dtype device".split()
)


def unloaded_runner(
    model_config: Any,
    server_args: Any,
    *,
    kv_cache_dtype: Any,
    num_layers: int,
    is_draft: bool = False,
) -> Any:
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.model_executor import model_runner as model_runner_module

    runner = model_runner_module.ModelRunner.__new__(model_runner_module.ModelRunner)
    runner.server_args = server_args
    runner.model_config = model_config
    runner.device = "cpu"
    runner.dtype = model_config.dtype
    runner.page_size = server_args.page_size
    runner.is_hybrid_swa = model_config.is_hybrid_swa
    runner.is_hybrid_swa_compress = getattr(model_config, "is_hybrid_swa_compress", False)
    runner.use_mla_backend = model_config.attention_arch == AttentionArch.MLA
    runner.enable_hisparse = server_args.enable_hisparse
    runner.is_draft_worker = is_draft
    runner.start_layer = 0
    runner.end_layer = num_layers
    runner.num_effective_layers = num_layers
    runner.kv_cache_dtype = kv_cache_dtype
    runner.req_to_token_pool = None
    runner.token_to_kv_pool_allocator = None
    runner._linear_attn_registry_cache = model_runner_module._UNSET
    return runner


def attention_tp(size: int) -> Any:
    """TEST DOUBLE: an attention-TP group of ``size`` ranks (this one rank 0), no process group."""
    from sglang.srt.distributed import parallel_state

    group = SimpleNamespace(world_size=size, rank_in_group=0, rank=0)
    return mock.patch.object(parallel_state, "_ATTN_TP", group)


def fp4_pools_as_on_cuda() -> Any:
    """TEST DOUBLE: ``is_float4_e2m1fn_x2`` answers as on CUDA (SGLang's FP4 pools need it)."""
    import torch
    from sglang.srt.model_executor import model_runner_kv_cache_mixin as mixin

    return mock.patch.object(mixin, "is_float4_e2m1fn_x2", lambda d: d == torch.float4_e2m1fn_x2)
