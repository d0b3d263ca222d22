"""The geometric KV spec of a live 0.5.13.x ModelRunner (sglang 0.5.13 / 0.5.13.post1)."""

from __future__ import annotations

from typing import Any

from sglang_specinit.budget import KVSpec

from harness.geometry.specs import DRAFT_FULL_ATTENTION_LAYERS, kv_spec_from_model_config


def kv_spec_for_runner(model_runner: Any) -> KVSpec:
    """The KV spec of a live ModelRunner whose weights are loaded and KV dtype resolved."""
    from sglang.srt.layers.dp_attention import get_attention_tp_size

    full_layers = None
    mambaish = model_runner.mambaish_config
    if mambaish is not None:
        # A hybrid draft's pool holds one full-attention layer (layer 0 of its own pool).
        full_layers = (
            DRAFT_FULL_ATTENTION_LAYERS
            if model_runner.is_draft_worker
            else len(
                [
                    i
                    for i in mambaish.full_attention_layer_ids
                    if model_runner.start_layer <= i < model_runner.end_layer
                ]
            )
        )
    return kv_spec_from_model_config(
        model_runner.model_config,
        model_runner.kv_cache_dtype,
        attn_tp_size=get_attention_tp_size(),
        num_layers=model_runner.num_effective_layers,
        swa_full_tokens_ratio=model_runner.server_args.swa_full_tokens_ratio,
        use_mla=model_runner.use_mla_backend,
        full_attention_layers=full_layers,
        server_args=model_runner.server_args,
    )
