"""The ``KVCacheConfigurator`` of a launch whose weights are not loaded (0.5.16 - 0.5.23), each
field from SGLang's own function as ``ModelRunner.init_kv_cache_configurator`` fills it: which
pools a launch builds depends only on these fields, so the planner prices them here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Layout:
    server_args: Any
    target: Any
    drafts: list[Any]


def model_config_of(server_args: Any, is_draft: bool) -> Any:
    """The ModelConfig a target / draft worker builds."""
    from sglang.srt.configs.model_config import ModelConfig

    return ModelConfig.from_server_args(
        server_args,
        model_path=(
            server_args.speculative_draft_model_path if is_draft else server_args.model_path
        ),
        is_draft_model=is_draft,
    )


def unloaded_configurator(
    server_args: Any,
    model_config: Any,
    *,
    is_draft: bool,
    draft_model_idx: int | None = None,
) -> Any:
    """The configurator ``ModelRunner.init_kv_cache_configurator`` would build (no weights)."""
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.mem_cache import kv_cache_dtype
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.model_executor.model_runner_components.load_model_utils import (
        resolve_sliding_window_size,
    )
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_specinit.sglang_0_5_23.release_shims import (
        configurator_layout_kwargs,
        configurator_parallel_kwargs,
        draft_kv_cache_dtype_kwargs,
        draft_kv_own_dtype,
        kv_cache_dtype_str_kwargs,
        published_bags,
        resolve_layer_info,
    )

    model, spec, schedule = published_bags(server_args)
    # As the runner reads it: the published (resolved) algorithm, NEXTN already EAGLE.
    spec_algorithm = SpeculativeAlgorithm.from_string(spec.speculative_algorithm)
    dtype_str, kv_dtype = kv_cache_dtype.configure_kv_cache_dtype(
        server_args_kv_cache_dtype=model.kv_cache_dtype,
        model=None,
        model_dtype=model_config.dtype,
        is_draft_worker=is_draft,
        is_dflash=draft_kv_own_dtype(spec_algorithm),
        speculative_draft_attention_backend=server_args.speculative_draft_attention_backend,
        **draft_kv_cache_dtype_kwargs(spec),
    )
    return KVCacheConfigurator(
        device=server_args.device,
        gpu_id=0,
        **configurator_parallel_kwargs(server_args),
        pp_group=None,
        model=None,
        model_config=model_config,
        server_args=server_args,
        kv_cache_dtype=kv_dtype,
        **kv_cache_dtype_str_kwargs(dtype_str if dtype_str is not None else model.kv_cache_dtype),
        model_dtype=model_config.dtype,
        page_size=schedule.page_size,
        sliding_window_size=resolve_sliding_window_size(None, model_config),
        spec_algorithm=spec_algorithm,
        is_draft_worker=is_draft,
        post_capture_kv_active=False,
        spec_aux_config=resolve_spec_aux_hidden_state_config(
            server_args=server_args,
            model_config=model_config,
            spec_algorithm=spec_algorithm,
            is_draft_worker=is_draft,
        ),
        **configurator_layout_kwargs(),
        is_hybrid_swa=model_config.is_hybrid_swa,
        is_hybrid_swa_compress=model_config.is_hybrid_swa_compress,
        use_mla_backend=model_config.attention_arch == AttentionArch.MLA,
        layer_info=resolve_layer_info(
            model_config,
            is_draft=is_draft,
            spec_algorithm=spec_algorithm,
            draft_model_idx=draft_model_idx,
        ),
        forward_stream=None,
        req_to_token_pool=None,
        token_to_kv_pool_allocator=None,
        memory_pool_config=None,
        draft_model_idx=draft_model_idx,
    )


def published_layout(draft_runners: int = 1, **server_args: Any) -> Layout:
    """Publish a launch's ServerArgs (rank 0) and build its target and draft configurators."""
    from sglang.srt.server_args import ServerArgs

    from sglang_specinit.sglang_0_5_23.release_shims import publish_launch, stamp_published_widths

    server_args.setdefault("device", "cpu")
    server_args.setdefault("skip_tokenizer_init", True)
    args = ServerArgs(**server_args)
    publish_launch(args)
    stamp_published_widths()
    target = unloaded_configurator(args, model_config_of(args, False), is_draft=False)
    drafts = []
    if args.speculative_algorithm not in (None, "NGRAM"):
        draft_config = model_config_of(args, True)
        drafts = [
            unloaded_configurator(
                args,
                draft_config,
                is_draft=True,
                draft_model_idx=i if draft_runners > 1 else None,
            )
            for i in range(draft_runners)
        ]
    return Layout(args, target, drafts)
