"""Config-only tiny models, one per architecture of SGLang's documented speculative recipes, and
a dense DeepSeek-V2 target with MLA attention (kind ``mla-target``) for the MLA pool tests."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.checkpoints.llama_family import DEFAULT_TARGET
from harness.checkpoints.llama_layout import (
    BOS_ID,
    EOS_ID,
    Kind,
    TinyLlamaShape,
    randn,
    resolve_cache_root,
    save_checkpoint,
    save_seeded_model,
    write_once,
)

VOCAB = 32000
HIDDEN = 64
MAX_POSITIONS = 2048

# DeepSeek's CPU rope factory asserts a YaRN rope_scaling; the hub configs carry one too.
YARN = {
    "type": "yarn",
    "rope_type": "yarn",
    "factor": 1.0,
    "original_max_position_embeddings": MAX_POSITIONS,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}


def _common(architecture: str, model_type: str, layers: int, **fields: Any) -> dict[str, Any]:
    return {
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": HIDDEN,
        "num_hidden_layers": layers,
        "vocab_size": VOCAB,
        "max_position_embeddings": MAX_POSITIONS,
        "torch_dtype": "bfloat16",
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_experts_per_tok": 2,
        "rope_theta": 10000,
        **fields,
    }


# The MoE (4 routed experts, 1 shared, top-2 in one group) and the one MTP layer of the
# DeepSeek and GLM-4.5 configs.
_MOE_MTP = {
    "moe_intermediate_size": 32,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    "num_nextn_predict_layers": 1,
}
# What every DeepSeek config adds: compressed (low-rank) KV and queries, YaRN rope.
_DEEPSEEK = {
    **_MOE_MTP,
    "kv_lora_rank": 32,
    "q_lora_rank": 48,
    "qk_rope_head_dim": 16,
    "rope_scaling": YARN,
}
_DSA_INDEXER = {"index_topk": 64, "index_head_dim": 32, "index_n_heads": 4}


def _deepseek_mla(architecture: str, model_type: str, **fields: Any) -> dict[str, Any]:
    """MLA attention, MoE from layer 1 on, one MTP layer (``num_nextn_predict_layers``)."""
    return _common(
        architecture,
        model_type,
        2,
        **_DEEPSEEK,
        num_key_value_heads=4,
        qk_nope_head_dim=16,
        v_head_dim=16,
        topk_method="noaux_tc",
        scoring_func="sigmoid",
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        first_k_dense_replace=1,
        moe_layer_freq=1,
        attention_bias=False,
        **fields,
    )


CONFIGS: dict[str, Callable[[], dict[str, Any]]] = {
    # DeepSeek-V3 / R1: MLA + MoE + one MTP layer.
    "deepseek-v3": lambda: _deepseek_mla("DeepseekV3ForCausalLM", "deepseek_v3"),
    # DeepSeek-V3.2: V3 plus the DSA indexer fields.
    "deepseek-v32": lambda: _deepseek_mla("DeepseekV32ForCausalLM", "deepseek_v32", **_DSA_INDEXER),
    # DeepSeek-V4: compressed KV pools the plugin does not price.
    "deepseek-v4": lambda: _common(
        "DeepseekV4ForCausalLM",
        "deepseek_v4",
        2,
        **_DEEPSEEK,
        **_DSA_INDEXER,
        num_key_value_heads=1,
        o_lora_rank=32,
        o_groups=2,
        qk_nope_head_dim=48,
        v_head_dim=64,
        head_dim=64,
        n_hash_layers=0,
        window_size=128,
        sliding_window=128,
        compress_ratios=[4, 128],
    ),
    # GLM-4.5 / 4.6: GQA with partial rotary, MoE, one MTP layer.
    "glm4-moe": lambda: _common(
        "Glm4MoeForCausalLM",
        "glm4_moe",
        2,
        **_MOE_MTP,
        num_key_value_heads=2,
        head_dim=16,
        partial_rotary_factor=0.5,
        use_qk_norm=True,
        attention_bias=True,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        first_k_dense_replace=1,
        rope_theta=1000000,
    ),
    # Qwen3-Next: gated-DeltaNet layers with full attention every 4th layer, MoE; no MTP
    # count in the config (SGLang sets one for the draft).
    "qwen3-next": lambda: _common(
        "Qwen3NextForCausalLM",
        "qwen3_next",
        4,
        num_key_value_heads=2,
        head_dim=16,
        partial_rotary_factor=0.25,
        full_attention_interval=4,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        num_experts=4,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
        rope_theta=10000000,
    ),
    # GPT-OSS: alternating sliding/full attention with sinks, MoE (bf16).
    "gpt-oss": lambda: _common(
        "GptOssForCausalLM",
        "gpt_oss",
        2,
        intermediate_size=64,
        num_key_value_heads=2,
        head_dim=16,
        num_local_experts=4,
        experts_per_token=2,
        sliding_window=128,
        layer_types=["sliding_attention", "full_attention"],
        attention_bias=True,
        swiglu_limit=7.0,
        rope_theta=150000,
        rope_scaling={
            "rope_type": "yarn",
            "factor": 1.0,
            "original_max_position_embeddings": MAX_POSITIONS,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
        },
    ),
}


def _cached(kind: str, config: dict[str, Any], write: Callable[[Path, str], None]) -> Path:
    text = json.dumps(config, indent=1, sort_keys=True)
    digest = hashlib.sha256(f"{kind}\n{text}".encode()).hexdigest()[:12]
    final = resolve_cache_root() / f"{kind}-{digest}"
    return write_once(final, "config.json", lambda tmp: write(tmp, text))


def tiny_config_dir(name: str) -> Path:
    """The directory holding only ``config.json`` for the tiny ``name`` architecture."""
    return _cached(
        f"config-{name}", CONFIGS[name](), lambda d, text: (d / "config.json").write_text(text)
    )


def _write_checkpoint(directory: Path, text: str, seed: int = 0) -> None:
    import torch
    import transformers
    from safetensors.torch import load_file

    config = json.loads(text)
    layers = config["num_hidden_layers"]
    mtp_layers = int(config.get("num_nextn_predict_layers") or 0)
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    # transformers' class of the architecture saves it in the published per-expert layout.
    hf_class = getattr(transformers, config["architectures"][0])
    kwargs = {k: v for k, v in config.items() if k not in ("architectures", "model_type")}
    # One decoder layer more than the config says: that layer is the MTP block's own layer.
    kwargs["num_hidden_layers"] = layers + mtp_layers
    torch.manual_seed(seed)
    model = hf_class(hf_class.config_class(**kwargs)).to(torch.bfloat16)
    staging = directory / "hf"
    model.save_pretrained(str(staging))
    tensors = load_file(str(staging / "model.safetensors"))
    shutil.rmtree(staging)
    gen, dt = torch.Generator().manual_seed(seed + 1), torch.bfloat16
    for index in range(layers, layers + mtp_layers):
        mtp = f"model.layers.{index}"
        tensors[f"{mtp}.embed_tokens.weight"] = randn(gen, vocab, hidden, dtype=dt)
        tensors[f"{mtp}.eh_proj.weight"] = randn(gen, hidden, 2 * hidden, dtype=dt)
        tensors[f"{mtp}.shared_head.head.weight"] = randn(gen, vocab, hidden, dtype=dt)
        for norm in ("enorm", "hnorm", "shared_head.norm"):
            tensors[f"{mtp}.{norm}.weight"] = torch.ones(hidden, dtype=dt)
    save_checkpoint(directory, tensors, text, vocab)


def tiny_checkpoint(name: str) -> Path:
    """Config, random weights (with any MTP block) and tokenizer of the tiny ``name``."""
    return _cached(f"weights-{name}", CONFIGS[name](), _write_checkpoint)


def write_mla_target(directory: Path, shape: TinyLlamaShape, seed: int) -> Path:
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
    rope_scaling = {**YARN, "original_max_position_embeddings": shape.max_position_embeddings}
    return save_seeded_model(
        directory, shape, seed, lambda: DeepseekV2ForCausalLM(config), rope_scaling=rope_scaling
    )


# Cached tiny dense DeepSeek-V2 target with MLA attention (with tokenizer).
tiny_mla_target = Kind("mla-target", write_mla_target, 1, DEFAULT_TARGET)
