"""A tiny MiMo-V2 target that carries its own MTP layers (kind ``mimo-v2-target``), for
multi-layer EAGLE."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.checkpoints.llama_layout import (
    BOS_ID,
    EOS_ID,
    Kind,
    TinyShape,
    layer_tensors,
    randn,
    save_checkpoint,
    seeded_generator,
)


@dataclass(frozen=True)
class TinyMiMoV2Shape(TinyShape):
    """Geometry of a tiny MiMo-V2 target with its MTP layers."""

    hybrid_layer_pattern: tuple[int, ...] = (0, 1)
    swa_heads: int = 4
    swa_kv_heads: int = 1
    swa_head_dim: int = 16
    sliding_window: int = 128
    mtp_layers: int = 3

    @property
    def layers(self) -> int:
        return len(self.hybrid_layer_pattern)

    @property
    def full_layers(self) -> int:
        return self.hybrid_layer_pattern.count(0)

    @property
    def swa_layers(self) -> int:
        return self.hybrid_layer_pattern.count(1)

    def swa_kv_bytes_per_token_per_layer(self) -> int:
        return _layer_shape(self, swa=True).kv_bytes_per_token_per_layer()


DEFAULT_MIMO_V2 = TinyMiMoV2Shape()

MIMO_V2_CONFIG_MODULE = "configuration_mimo_v2_flash"
# The remote-code config class: every config.json key becomes an attribute, with defaults for
# the keys SGLang's MiMo-V2 model reads unconditionally.
MIMO_V2_CONFIG_SOURCE = '''"""Tiny MiMo-V2 config for sglang-specinit CPU tests (generated)."""

from transformers import PretrainedConfig


class MiMoV2FlashConfig(PretrainedConfig):
    model_type = "mimo_v2_flash"

    def __init__(self, **kwargs):
        defaults = {
            "encoder_only": False,
            "attention_bias": False,
            "add_swa_attention_sink_bias": False,
            "add_full_attention_sink_bias": False,
            "hidden_act": "silu",
            "layernorm_epsilon": 1e-6,
            "n_routed_experts": 1,
            "moe_layer_freq": [],
            "partial_rotary_factor": 1.0,
            "rope_theta": 10000.0,
            "swa_rope_theta": 10000.0,
        }
        tie = kwargs.pop("tie_word_embeddings", False)
        for key, value in {**defaults, **kwargs}.items():
            setattr(self, key, value)
        super().__init__(tie_word_embeddings=tie, **kwargs)
'''


def _layer_shape(shape: TinyMiMoV2Shape, swa: bool) -> TinyMiMoV2Shape:
    """The attention widths of one MiMo-V2 decoder layer (for ``llama_layout.layer_tensors``)."""
    if not swa:
        return shape
    return replace(
        shape, heads=shape.swa_heads, kv_heads=shape.swa_kv_heads, head_dim=shape.swa_head_dim
    )


def write_mimo_v2_target(directory: Path, shape: TinyMiMoV2Shape, seed: int) -> Path:
    """Write a random MiMo-V2 target whose checkpoint also holds its MTP layers."""
    import torch

    directory, gen, dt = seeded_generator(directory, shape, seed)
    h = shape.hidden
    tensors: dict[str, Any] = {
        "model.embed_tokens.weight": randn(gen, shape.vocab, h, dtype=dt),
        "model.norm.weight": torch.ones(h, dtype=dt),
        "lm_head.weight": randn(gen, shape.vocab, h, dtype=dt),
    }
    layers = [(f"model.layers.{i}", kind == 1) for i, kind in enumerate(shape.hybrid_layer_pattern)]
    layers += [(f"model.mtp.layers.{i}", True) for i in range(shape.mtp_layers)]
    for prefix, swa in layers:
        layer_shape = _layer_shape(shape, swa=swa)
        tensors.update(layer_tensors(gen, prefix, layer_shape, qkv_in=h, input_layernorm=True))
        if prefix.startswith("model.mtp."):
            for norm in ("enorm", "hnorm", "final_layernorm"):
                tensors[f"{prefix}.{norm}.weight"] = torch.ones(h, dtype=dt)
            tensors[f"{prefix}.eh_proj.weight"] = randn(gen, h, 2 * h, dtype=dt)
    config = {
        "architectures": ["MiMoV2FlashForCausalLM"],
        "model_type": "mimo_v2_flash",
        "auto_map": {"AutoConfig": f"{MIMO_V2_CONFIG_MODULE}.MiMoV2FlashConfig"},
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "v_head_dim": shape.head_dim,
        "swa_num_attention_heads": shape.swa_heads,
        "swa_num_key_value_heads": shape.swa_kv_heads,
        "swa_head_dim": shape.swa_head_dim,
        "swa_v_head_dim": shape.swa_head_dim,
        "sliding_window": shape.sliding_window,
        "sliding_window_size": shape.sliding_window,
        "hybrid_layer_pattern": list(shape.hybrid_layer_pattern),
        "moe_layer_freq": [0] * shape.layers,
        "num_nextn_predict_layers": shape.mtp_layers,
        "vocab_size": shape.vocab,
        "max_position_embeddings": shape.max_position_embeddings,
        "layernorm_epsilon": 1e-6,
        "hidden_act": "silu",
        "rope_theta": 10000.0,
        "swa_rope_theta": 10000.0,
        "attention_bias": False,
        "add_swa_attention_sink_bias": False,
        "add_full_attention_sink_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": shape.dtype,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "encoder_only": False,
        "n_routed_experts": 1,
    }
    (directory / f"{MIMO_V2_CONFIG_MODULE}.py").write_text(MIMO_V2_CONFIG_SOURCE)
    return save_checkpoint(directory, tensors, json.dumps(config, indent=1), shape.vocab)


# Cached MiMo-V2 target with ``shape.mtp_layers`` MTP layers in the same checkpoint.
tiny_mimo_v2_target = Kind("mimo-v2-target", write_mimo_v2_target, 2, DEFAULT_MIMO_V2)
