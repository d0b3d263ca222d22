"""A ``ModelRunner`` without weights, for releases whose runner sizes and builds its own pools:
built on this host (cuda, else cpu), with the attention-TP width answering the planned launch's
and, on cpu, the KV pool's warm-up self-copy skipped."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from sglang_specinit.budget import BudgetInputs, PoolPlan, make_plan, static_budget_bytes
from sglang_specinit.model_facts import runner_layer_count, upstream_reserved_layers
from sglang_specinit.planner.replay import (
    build_model_config,
    installed_release,
    kv_cache_quant_algo,
    released,
)


def pricing_device() -> str:
    """Where the pricing pools are built: this host's CUDA device, else cpu (decided by torch)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def unloaded_runner(server_args: Any, model_config: Any, *, is_draft: bool) -> Any:
    """A ``ModelRunner`` for ``model_config`` without weights: the fields the pool code reads,
    set as ``__init__`` / ``initialize`` set them (pp_size 1), KV dtype by the release's rule."""
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.model_executor import model_runner as model_runner_module
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    runner = ModelRunner.__new__(ModelRunner)
    layers = runner_layer_count(model_config, is_draft=is_draft)
    runner.__dict__.update(
        mem_fraction_static=server_args.mem_fraction_static,
        memory_pool_config=None,
        device=pricing_device(),
        gpu_id=0,
        tp_rank=0,
        tp_size=int(server_args.tp_size),
        dp_size=server_args.dp_size if server_args.enable_dp_attention else 1,
        pp_rank=0,
        pp_size=1,
        attn_cp_size=server_args.attn_cp_size,
        model_config=model_config,
        server_args=server_args,
        is_draft_worker=is_draft,
        spec_algorithm=SpeculativeAlgorithm.from_string(server_args.speculative_algorithm),
        page_size=server_args.page_size,
        req_to_token_pool=None,
        token_to_kv_pool_allocator=None,
        is_hybrid_swa=model_config.is_hybrid_swa,
        is_hybrid_swa_compress=getattr(model_config, "is_hybrid_swa_compress", False),
        use_mla_backend=model_config.attention_arch == AttentionArch.MLA,
        attention_chunk_size=model_config.attention_chunk_size,
        enable_hisparse=server_args.enable_hisparse,
        draft_model_idx=0 if is_draft else None,
        start_layer=0,
        end_layer=layers,
        num_effective_layers=layers,
        dtype=model_config.dtype,
        # Decode context parallelism, where the release has it.
        **({"dcp_size": server_args.dcp_size} if hasattr(server_args, "dcp_size") else {}),
        # mambaish_config's lookup cache, unset until read.
        _linear_attn_registry_cache=model_runner_module._UNSET,
        # What configure_kv_cache_dtype reads from the loaded model.
        model=SimpleNamespace(
            quant_config=SimpleNamespace(kv_cache_quant_algo=kv_cache_quant_algo(model_config))
        ),
    )
    released(ModelRunner.configure_kv_cache_dtype)(runner)
    return runner


def unloaded_draft_runner(launch: Any) -> Any:
    """The launch's draft runner without weights; None without a draft model (NGRAM)."""
    from sglang.srt.configs.model_config import ModelConfig

    args = launch.args
    if args.speculative_algorithm in (None, "NGRAM"):
        return None
    draft_mc = build_model_config(
        ModelConfig.from_server_args,
        launch.config_source,
        model_path=args.speculative_draft_model_path or args.model_path,
        model_revision=args.speculative_draft_model_revision,
        is_draft_model=True,
    )
    return unloaded_runner(args, draft_mc, is_draft=True)


@contextlib.contextmanager
def pricing_pools(attn_tp_size: int) -> Iterator[None]:
    """Pools built inside answer the planned attention-TP width and, on cpu, skip their
    warm-up self-copy."""
    on_cpu = pricing_device() == "cpu"
    with (
        attention_tp_size_answering(attn_tp_size),
        kv_warm_up_copy_skipped() if on_cpu else contextlib.nullcontext(),
    ):
        yield


@contextlib.contextmanager
def kv_warm_up_copy_skipped() -> Iterator[None]:
    """The KV pools built inside skip their Triton warm-up self-copy (no bytes moved or
    allocated; a GPU-less host cannot run it); any other launch reaches the kernel."""
    import torch
    from sglang.srt.mem_cache import memory_pool

    kernel = memory_pool.copy_all_layer_kv_cache_tiled

    class _SelfCopySkipped:
        def __getitem__(self, grid: Any) -> Any:
            def launch(ptrs: Any, strides: Any, tgt: Any, src: Any, *args: Any, **kw: Any) -> None:
                if tgt is src or torch.equal(tgt, src):
                    return
                kernel[grid](ptrs, strides, tgt, src, *args, **kw)

            return launch

    memory_pool.copy_all_layer_kv_cache_tiled = _SelfCopySkipped()
    try:
        yield
    finally:
        memory_pool.copy_all_layer_kv_cache_tiled = kernel


@contextlib.contextmanager
def attention_tp_size_answering(attn_tp_size: int) -> Iterator[None]:
    """The pool code's ``get_attention_tp_size`` answering the planned launch's width."""
    from sglang.srt.model_executor import pool_configurator
    from sglang.srt.model_executor.model_runner import ModelRunner

    # The runner's pool code (its KV-cache mixin's module) and the configurators'.
    modules = (sys.modules[ModelRunner._init_pools.__module__], pool_configurator)
    saved = [m.get_attention_tp_size for m in modules]
    for module in modules:
        module.get_attention_tp_size = lambda: attn_tp_size
    try:
        yield
    finally:
        for module, name in zip(modules, saved, strict=True):
            module.get_attention_tp_size = name


def reserve_draft_layers(target: Any, server_args: Any, draft_mc: Any) -> None:
    """The draft layers the target runner's ``__init__`` reserves (its configurator scales the
    cell by them): DFLASH by the release's parser, EAGLE / STANDALONE with a draft path."""
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

    algorithm = target.spec_algorithm
    target.eagle_draft_num_layers = None
    target.dflash_draft_num_layers = None
    if draft_mc is None:
        return
    if (algorithm.is_eagle() or algorithm.is_standalone()) and (
        server_args.speculative_draft_model_path
    ):
        target.eagle_draft_num_layers = upstream_reserved_layers(
            str(server_args.speculative_algorithm), draft_mc
        )
    if algorithm.is_dflash():
        config = parse_dflash_draft_config(draft_hf_config=draft_mc.hf_config)
        target.dflash_draft_num_layers = int(config.require_num_layers())


def runner_stock_plan(
    target: Any,
    attn_tp_size: int,
    inputs: BudgetInputs,
    *,
    at_profile: int,
    resident: int,
    notes: tuple[str, ...] = (),
) -> PoolPlan:
    """Stock's plan by the release's ``_resolve_memory_pool_config`` on the unloaded target,
    profiled at ``f x free`` minus ``at_profile`` and the reserve; below one page, 0 tokens."""
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    available = static_budget_bytes(inputs) - at_profile - inputs.reserved_bytes
    with attention_tp_size_answering(attn_tp_size):
        cell = float(create_memory_pool_configurator(target)._cell_size)
        tokens = 0
        if available > 0 and available // cell >= inputs.page_size:
            target._profile_available_bytes = lambda _pre_model_load_memory: available
            try:
                config = released(ModelRunner._resolve_memory_pool_config)(target, 0)
            finally:
                del target._profile_available_bytes
            tokens = int(config.max_total_num_tokens)

    return make_plan(
        f"stock-{installed_release()}",
        inputs,
        tokens,
        resident,
        cell,
        (at_profile + inputs.reserved_bytes) / inputs.pre_load_free_bytes,
        notes,
        derive_max_reqs=lambda n, *_: int(released(ModelRunner._resolve_max_num_reqs)(target, n)),
    )
