"""A tiny dense DeepSeek-V2 target with MLA attention (kind ``mla-target``), for the MLA pool
tests: generated from a seed through transformers' own ``DeepseekV2ForCausalLM``, with the tiny
tokenizer, cached by :mod:`harness.checkpoints.checkpoint_cache`.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.checkpoints.checkpoint_cache import Kind
from harness.checkpoints.llama_family import DEFAULT_TARGET
from harness.checkpoints.llama_layout import TinyLlamaShape, save_seeded_model
from harness.checkpoints.tiny_configs import YARN


def write_mla_target(
    directory: Path, shape: TinyLlamaShape = DEFAULT_TARGET, seed: int = 0
) -> Path:
    """Write a random dense ``DeepseekV2ForCausalLM`` (MLA attention) plus its tokenizer."""
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    config = DeepseekV2Config(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        moe_intermediate_size=shape.intermediate // 2,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        kv_lora_rank=32,
        q_lora_rank=None,
        qk_rope_head_dim=16,
        qk_nope_head_dim=16,
        v_head_dim=16,
        first_k_dense_replace=shape.layers + 1,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        max_position_embeddings=shape.max_position_embeddings,
    )
    directory = save_seeded_model(directory, shape, seed, lambda: DeepseekV2ForCausalLM(config))
    config_path = directory / "config.json"
    saved = json.loads(config_path.read_text())
    saved["rope_scaling"] = {
        **YARN,
        "original_max_position_embeddings": shape.max_position_embeddings,
    }
    config_path.write_text(json.dumps(saved, indent=1))
    return directory


# Cached tiny dense DeepSeek-V2 target with MLA attention (with tokenizer).
tiny_mla_target = Kind("mla-target", write_mla_target, 1, DEFAULT_TARGET)
