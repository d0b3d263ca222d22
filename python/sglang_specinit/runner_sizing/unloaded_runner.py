"""A ``ModelRunner`` without weights, for releases whose runner builds and sizes its own pools
(sglang 0.5.13.x to 0.5.15: ``ModelRunnerKVCacheMixin._apply_memory_pool_config``,
``_init_pools``, ``_resolve_memory_pool_config``), so the planner prices every pool and sizes
stock's with the functions the server runs (:func:`runner_stock_plan`).

``ModelRunner.__init__`` loads the model; the pool code reads only the fields
:func:`unloaded_runner` sets, each from the source ``__init__`` / ``initialize`` use. The pools
are built on this host (:func:`pricing_device`); on cpu the KV pool's Triton warm-up copy,
which copies one slot onto itself and allocates nothing, is skipped for the pricing call
(:func:`kv_warm_up_copy_skipped`), and the attention-TP width the pool code reads from the
process's group answers the planned launch's (:func:`attention_tp_size_answering`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from sglang_specinit.budget import BudgetInputs, PoolPlan, make_plan, static_budget_bytes
from sglang_specinit.model_facts import runner_layer_count, upstream_reserved_layers
from sglang_specinit.planner.replay import installed_release, kv_cache_quant_algo, released


def pricing_device() -> str:
    """Where the pricing pools are built: this host's CUDA device, else cpu (decided by torch)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def unloaded_runner(server_args: Any, model_config: Any, *, is_draft: bool) -> Any:
    """A ``ModelRunner`` of the installed release for ``model_config`` without weights.

    ``ModelRunner.__init__`` loads the model; the pool code (``_apply_memory_pool_config``,
    ``_init_pools``) reads only the fields below, set as ``__init__`` and ``initialize`` set
    them (``model_runner.py`` in 0.5.14: the parse block, ``start_layer``/``end_layer`` from
    the model's layer count, pp_size 1), the layer count by :func:`model_facts.runner_layer_count`
    (the same rule). The device is this host's (:func:`pricing_device`); the KV dtype comes
    from the release's own ``configure_kv_cache_dtype`` with the checkpoint's KV quantization.
    """
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
        # 0.5.15's decode context parallelism (its ModelRunner.__init__ sets it; 0.5.14 has none).
        **({"dcp_size": server_args.dcp_size} if hasattr(server_args, "dcp_size") else {}),
        # mambaish_config's cache of the linear-attention registry lookup (unset until read).
        _linear_attn_registry_cache=model_runner_module._UNSET,
        # What configure_kv_cache_dtype reads from the loaded model.
        model=SimpleNamespace(
            quant_config=SimpleNamespace(kv_cache_quant_algo=kv_cache_quant_algo(model_config))
        ),
    )
    released(ModelRunner.configure_kv_cache_dtype)(runner)
    return runner


@contextlib.contextmanager
def kv_warm_up_copy_skipped() -> Iterator[None]:
    """The KV pools built inside skip their Triton warm-up copy, and only that (cpu only).

    ``MHATokenToKVPool._init_kv_copy_and_warmup`` (``mem_cache/memory_pool.py`` in 0.5.14 /
    0.5.15) launches ``copy_all_layer_kv_cache_tiled[grid](...)`` once with one location copied
    onto itself (``dummy_loc`` to ``dummy_loc``): it compiles the kernel, moves no byte and
    allocates nothing, so a pool's bytes are the same without it; a GPU-less host has no
    driver to run it on. Inside this context the name the pool module launches answers such a
    self-copy by doing nothing and hands any other launch to the release's kernel.
    """
    import torch
    from sglang.srt.mem_cache import memory_pool

    kernel = memory_pool.copy_all_layer_kv_cache_tiled

    class _SelfCopySkipped:
        def __getitem__(self, grid: Any) -> Any:
            def launch(ptrs: Any, strides: Any, tgt: Any, src: Any, *args: Any, **kw: Any) -> None:
                if tgt is src or torch.equal(tgt, src):
                    return  # each location onto itself: nothing to move
                kernel[grid](ptrs, strides, tgt, src, *args, **kw)

            return launch

    memory_pool.copy_all_layer_kv_cache_tiled = _SelfCopySkipped()
    try:
        yield
    finally:
        memory_pool.copy_all_layer_kv_cache_tiled = kernel


@contextlib.contextmanager
def attention_tp_size_answering(attn_tp_size: int) -> Iterator[None]:
    """The pool code's attention-TP width answering the planned launch's.

    ``_init_pools`` divides KV heads by ``get_attention_tp_size()`` (bound by name in
    ``model_runner_kv_cache_mixin``), and the pool configurators their cells by the same name
    bound in ``pool_configurator``; it reads the process's attention-TP group, and a planner
    process has none. Inside this context both names answer ``attn_tp_size`` (the replay's
    ``compute_dp_attention_world_info`` result, the function that group is built from).
    """
    from sglang.srt.model_executor import model_runner_kv_cache_mixin as mixin
    from sglang.srt.model_executor import pool_configurator

    modules = (mixin, pool_configurator)
    saved = [m.get_attention_tp_size for m in modules]
    for module in modules:
        module.get_attention_tp_size = lambda: attn_tp_size
    try:
        yield
    finally:
        for module, name in zip(modules, saved, strict=True):
            module.get_attention_tp_size = name


def reserve_draft_layers(target: Any, server_args: Any, draft_mc: Any) -> None:
    """The draft reserve the target runner's ``__init__`` reads from the draft's config, which
    its pool configurator scales the cell by: ``dflash_draft_num_layers`` by the release's
    ``parse_dflash_draft_config`` (0.5.13.x on), and from 0.5.14 ``eagle_draft_num_layers`` for
    EAGLE / EAGLE3 / frozen-KV MTP / STANDALONE with a draft path
    (:func:`model_facts.upstream_reserved_layers`, the same rule; 0.5.13.x reads none)."""
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


@contextlib.contextmanager
def profiled_as(runner: Any, available_bytes: int) -> Iterator[None]:
    """The runner's ``_profile_available_bytes`` answering ``available_bytes`` (what the
    release's own profile would read on the planned device), and only for this runner."""
    runner._profile_available_bytes = lambda _pre_model_load_memory: available_bytes
    try:
        yield
    finally:
        del runner._profile_available_bytes


def runner_stock_plan(
    target: Any,
    attn_tp_size: int,
    inputs: BudgetInputs,
    *,
    at_profile: int,
    resident: int,
    notes: tuple[str, ...] = (),
) -> PoolPlan:
    """Stock's plan by the installed release's own sizing on the unloaded target runner:
    ``_resolve_memory_pool_config`` (its configurator, token constraints and request count)
    with the profile answered by ``f x free`` minus ``at_profile`` (what the release has
    resident when the target profiles) and the reserved bytes; the cell is the configurator's
    ``_cell_size``. Below one page the release refuses to start: the plan says 0 tokens."""
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    available = static_budget_bytes(inputs) - at_profile - inputs.reserved_bytes
    with attention_tp_size_answering(attn_tp_size):
        cell = float(create_memory_pool_configurator(target)._cell_size)
        tokens = 0
        if available > 0 and available // cell >= inputs.page_size:
            with profiled_as(target, available):
                config = released(ModelRunner._resolve_memory_pool_config)(target, 0)
            tokens = int(config.max_total_num_tokens)

    def max_requests(n: int, *_: Any) -> int:
        return int(released(ModelRunner._resolve_max_num_reqs)(target, n))

    return make_plan(
        f"stock-{installed_release()}",
        inputs,
        tokens,
        resident,
        cell,
        (at_profile + inputs.reserved_bytes) / inputs.pre_load_free_bytes,
        notes,
        derive_max_reqs=max_requests,
    )
