"""More tiny random checkpoints for the per-worker CPU tests (STANDALONE, multi-layer EAGLE...).

Same conventions as :mod:`harness.tiny_models`: generated locally from a seed, a few MiB,
cached under ``<repo>/.cache/tiny-models/<kind>-<hash>`` keyed by every parameter plus
:data:`GENERATOR_VERSION`, written to a temporary directory and renamed into place.

- ``standalone-draft``: a complete small ``LlamaForCausalLM`` (its own embedding and
  ``lm_head``, a KV geometry unlike the target's), which is what a STANDALONE draft is;
- ``mimo-v2-target``: a ``MiMoV2FlashForCausalLM`` (hybrid full/sliding-window attention,
  dense MLPs) that also carries ``num_nextn_predict_layers`` MTP layers under
  ``model.mtp.layers.<i>.`` (the names SGLang's MiMo-V2 loaders read). SGLang's multi-layer
  EAGLE loads it once as the target and once per draft step as ``MiMoV2MTP`` (the loader keeps
  only ``model.mtp.layers.<draft_model_idx>``). transformers 5.8 has no MiMo-V2 config class
  and SGLang registers none, so the directory ships a ``configuration_mimo_v2_flash.py``
  referenced by ``auto_map`` (the usual remote-code layout), and the Engine needs
  ``trust_remote_code=True``;
- ``dflash-draft``: a ``DFlashDraftModel`` for the default tiny Llama target;
- ``gemma4-target`` / ``gemma4-assistant``: a text-only Gemma 4 target and its Gemma 4
  assistant, which SGLang promotes to a frozen-KV MTP draft (weights from transformers' own
  Gemma 4 classes);
- ``qwen2``: a ``Qwen2ForCausalLM`` (QKV bias) with tokenizer, the architecture of SGLang's
  STANDALONE and NGRAM recipes (Qwen2.5 target and draft).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness import tiny_models
from harness.tiny_models import (
    BOS_ID,
    EOS_ID,
    TinyLlamaShape,
    _layer_tensors,
    _randn,
    _save_safetensors,
    _torch_dtype,
    write_llama_target,
    write_tokenizer,
)

# Bump when the generated files change, so stale cache entries are not reused.
GENERATOR_VERSION = 2

# A STANDALONE draft: fewer, narrower layers and a KV geometry unlike the target's
# (1 KV head of dim 24 against the target's 2 heads of dim 16), its own embedding and head.
DEFAULT_STANDALONE_DRAFT = replace(
    tiny_models.DEFAULT_TARGET,
    hidden=32,
    layers=1,
    heads=2,
    kv_heads=1,
    head_dim=24,
    intermediate=64,
)


@dataclass(frozen=True)
class TinyMiMoV2Shape:
    """Geometry of a tiny MiMo-V2 target with its MTP layers.

    ``hybrid_layer_pattern[i]`` is 1 for a sliding-window layer, 0 for full attention. The
    sliding-window layers (and every MTP layer, which SGLang builds as a sliding-window layer)
    use the ``swa_*`` geometry, deliberately different from the full-attention one.
    """

    hidden: int = 64
    hybrid_layer_pattern: tuple[int, ...] = (0, 1)
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    swa_heads: int = 4
    swa_kv_heads: int = 1
    swa_head_dim: int = 16
    sliding_window: int = 128
    intermediate: int = 128
    vocab: int = 32000
    mtp_layers: int = 3
    dtype: str = "bfloat16"
    max_position_embeddings: int = 2048

    @property
    def layers(self) -> int:
        return len(self.hybrid_layer_pattern)

    @property
    def dtype_bytes(self) -> int:
        return {"bfloat16": 2, "float16": 2, "float32": 4}[self.dtype]

    @property
    def full_layers(self) -> int:
        return self.hybrid_layer_pattern.count(0)

    @property
    def swa_layers(self) -> int:
        return self.hybrid_layer_pattern.count(1)

    def full_kv_bytes_per_token_per_layer(self) -> int:
        return self.kv_heads * self.head_dim * 2 * self.dtype_bytes

    def swa_kv_bytes_per_token_per_layer(self) -> int:
        return self.swa_kv_heads * self.swa_head_dim * 2 * self.dtype_bytes


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


def _mimo_v2_config(shape: TinyMiMoV2Shape) -> dict[str, Any]:
    return {
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


def _mimo_attention_shape(shape: TinyMiMoV2Shape, swa: bool) -> TinyLlamaShape:
    """The Llama-layout shape of one MiMo-V2 decoder layer (for ``_layer_tensors``)."""
    return TinyLlamaShape(
        hidden=shape.hidden,
        heads=shape.swa_heads if swa else shape.heads,
        kv_heads=shape.swa_kv_heads if swa else shape.kv_heads,
        head_dim=shape.swa_head_dim if swa else shape.head_dim,
        intermediate=shape.intermediate,
        vocab=shape.vocab,
        dtype=shape.dtype,
    )


def write_mimo_v2_target(
    directory: Path, shape: TinyMiMoV2Shape = DEFAULT_MIMO_V2, seed: int = 0
) -> Path:
    """Write a random MiMo-V2 target whose checkpoint also holds its MTP layers."""
    import torch

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    dt = _torch_dtype(shape.dtype)
    h = shape.hidden
    tensors: dict[str, Any] = {
        "model.embed_tokens.weight": _randn(gen, shape.vocab, h, dtype=dt),
        "model.norm.weight": torch.ones(h, dtype=dt),
        "lm_head.weight": _randn(gen, shape.vocab, h, dtype=dt),
    }
    for i, kind in enumerate(shape.hybrid_layer_pattern):
        tensors.update(
            _layer_tensors(
                gen,
                f"model.layers.{i}",
                _mimo_attention_shape(shape, swa=kind == 1),
                qkv_in=h,
                input_layernorm=True,
            )
        )
    for i in range(shape.mtp_layers):
        prefix = f"model.mtp.layers.{i}"
        tensors.update(
            _layer_tensors(
                gen, prefix, _mimo_attention_shape(shape, swa=True), qkv_in=h, input_layernorm=True
            )
        )
        tensors[f"{prefix}.enorm.weight"] = torch.ones(h, dtype=dt)
        tensors[f"{prefix}.hnorm.weight"] = torch.ones(h, dtype=dt)
        tensors[f"{prefix}.final_layernorm.weight"] = torch.ones(h, dtype=dt)
        tensors[f"{prefix}.eh_proj.weight"] = _randn(gen, h, 2 * h, dtype=dt)
    (directory / "config.json").write_text(json.dumps(_mimo_v2_config(shape), indent=1))
    (directory / f"{MIMO_V2_CONFIG_MODULE}.py").write_text(MIMO_V2_CONFIG_SOURCE)
    _save_safetensors(directory, tensors)
    write_tokenizer(directory, shape.vocab)
    return directory


# A DFLASH draft over the default 2-layer target: one layer, and a KV geometry unlike the
# target's (2 KV heads of dim 32, 256 B/token, against the target's 128 B/token/layer), so the
# 0.5.13 rule "scale the target cell by (T + D) / T" underprices it.
DEFAULT_DFLASH_DRAFT = replace(
    tiny_models.DEFAULT_TARGET, layers=1, heads=4, kv_heads=2, head_dim=32
)
DFLASH_BLOCK_SIZE = 4
DFLASH_MASK_TOKEN_ID = 3


def write_dflash_draft(
    directory: Path,
    shape: TinyLlamaShape = DEFAULT_DFLASH_DRAFT,
    seed: int = 0,
    *,
    target_layer_ids: tuple[int, ...] = (0, 1),
) -> Path:
    """Write a random ``DFlashDraftModel`` (``models/dflash.py``) for a Llama target.

    Layout as that loader expects: ``layers.N`` (Qwen3-style attention with ``q_norm``/
    ``k_norm``), final ``norm``, ``fc`` of shape ``[H, K * H]`` (K = number of captured target
    layers) and ``hidden_norm``; no embedding or head (DFLASH uses the target's). The config is a
    ``LlamaConfig`` with ``architectures = ["DFlashDraftModel"]`` and a ``dflash_config`` giving
    the captured target layers, the block size and a mask token id inside the vocabulary.
    """
    import torch

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    dt = _torch_dtype(shape.dtype)
    h = shape.hidden
    tensors: dict[str, Any] = {
        "norm.weight": torch.ones(h, dtype=dt),
        "hidden_norm.weight": torch.ones(h, dtype=dt),
        "fc.weight": _randn(gen, h, len(target_layer_ids) * h, dtype=dt),
    }
    for i in range(shape.layers):
        tensors.update(_layer_tensors(gen, f"layers.{i}", shape, qkv_in=h, input_layernorm=True))
        tensors[f"layers.{i}.self_attn.q_norm.weight"] = torch.ones(shape.head_dim, dtype=dt)
        tensors[f"layers.{i}.self_attn.k_norm.weight"] = torch.ones(shape.head_dim, dtype=dt)
    dflash_config = {
        "target_layer_ids": list(target_layer_ids),
        "num_target_layers": tiny_models.DEFAULT_TARGET.layers,
        "block_size": DFLASH_BLOCK_SIZE,
        "mask_token_id": DFLASH_MASK_TOKEN_ID,
    }
    tiny_models._llama_config(
        shape, "DFlashDraftModel", dflash_config=dflash_config, block_size=DFLASH_BLOCK_SIZE
    ).save_pretrained(str(directory))
    _save_safetensors(directory, tensors)
    return directory


@dataclass(frozen=True)
class TinyGemma4Shape:
    """Geometry of a tiny Gemma 4 text target or Gemma 4 assistant (frozen-KV MTP draft).

    ``layer_types`` lists ``sliding_attention``/``full_attention`` per layer; every layer uses
    ``kv_heads`` heads of ``head_dim`` (the full-attention ``global_*`` variants are left equal,
    see :func:`write_gemma4_target`). ``backbone_hidden`` only matters for the assistant: it is
    the target's hidden size its pre/post projections map from and to.
    """

    hidden: int = 64
    layer_types: tuple[str, ...] = ("sliding_attention", "full_attention")
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    intermediate: int = 128
    vocab: int = 32000
    sliding_window: int = 128
    backbone_hidden: int = 64
    dtype: str = "bfloat16"
    max_position_embeddings: int = 2048

    @property
    def layers(self) -> int:
        return len(self.layer_types)

    @property
    def dtype_bytes(self) -> int:
        return {"bfloat16": 2, "float16": 2, "float32": 4}[self.dtype]

    def kv_bytes_per_token_per_layer(self) -> int:
        return self.kv_heads * self.head_dim * 2 * self.dtype_bytes


DEFAULT_GEMMA4_TARGET = TinyGemma4Shape()
DEFAULT_GEMMA4_ASSISTANT = TinyGemma4Shape(hidden=32, heads=2, intermediate=64)


def _gemma4_text_config_kwargs(shape: TinyGemma4Shape) -> dict[str, Any]:
    return {
        "vocab_size": shape.vocab,
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "global_head_dim": shape.head_dim,
        "max_position_embeddings": shape.max_position_embeddings,
        "sliding_window": shape.sliding_window,
        "layer_types": list(shape.layer_types),
        "hidden_size_per_layer_input": 0,
        "vocab_size_per_layer_input": 0,
        # SGLang's CPU loader pads every *intermediate_size it finds and cannot pad None.
        "moe_intermediate_size": shape.intermediate,
        "tie_word_embeddings": True,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": 0,
    }


def write_gemma4_target(
    directory: Path, shape: TinyGemma4Shape = DEFAULT_GEMMA4_TARGET, seed: int = 0
) -> Path:
    """Write a random text-only ``Gemma4ForCausalLM`` (``model_type: gemma4_text``).

    Weights come from transformers' own ``Gemma4ForCausalLM`` (so the names are the published
    ones). SGLang 0.5.13.post1 renames Gemma 4's attention keys into its ``swa_*`` convention
    only for ``model_type`` ``gemma4``/``gemma4_assistant``, not for ``gemma4_text``; the
    ``swa_*`` keys it then reads are written into ``config.json`` here, equal to the base ones.
    """
    import torch
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = Gemma4TextConfig(**_gemma4_text_config_kwargs(shape))
    config.architectures = ["Gemma4ForCausalLM"]
    Gemma4ForCausalLM(config).to(_torch_dtype(shape.dtype)).save_pretrained(str(directory))
    path = directory / "config.json"
    raw = json.loads(path.read_text())
    raw.update(
        swa_num_key_value_heads=shape.kv_heads,
        swa_head_dim=shape.head_dim,
        swa_v_head_dim=shape.head_dim,
        v_head_dim=shape.head_dim,
    )
    path.write_text(json.dumps(raw, indent=1))
    write_tokenizer(directory, shape.vocab)
    return directory


def write_gemma4_assistant(
    directory: Path, shape: TinyGemma4Shape = DEFAULT_GEMMA4_ASSISTANT, seed: int = 0
) -> Path:
    """Write a random ``Gemma4AssistantForCausalLM`` (the frozen-KV MTP draft) via transformers.

    Its layers read the target's KV cache (every layer is KV-shared), its ``layer_types`` must
    be types the target's last two layers have, and its projections map from/to
    ``shape.backbone_hidden`` (the target's hidden size).
    """
    import torch
    from transformers.models.gemma4_assistant.configuration_gemma4_assistant import (
        Gemma4AssistantConfig,
    )
    from transformers.models.gemma4_assistant.modeling_gemma4_assistant import (
        Gemma4AssistantForCausalLM,
    )

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = Gemma4AssistantConfig(
        text_config=_gemma4_text_config_kwargs(shape),
        backbone_hidden_size=shape.backbone_hidden,
        use_ordered_embeddings=False,
    )
    config.architectures = ["Gemma4AssistantForCausalLM"]
    Gemma4AssistantForCausalLM(config).to(_torch_dtype(shape.dtype)).save_pretrained(str(directory))
    return directory


# Qwen2.5-style target and STANDALONE draft for the recipe rows: the draft is narrower, with a KV
# geometry unlike the target's (1 KV head of dim 24 against 2 heads of dim 16).
DEFAULT_QWEN2_TARGET = tiny_models.DEFAULT_TARGET
DEFAULT_QWEN2_DRAFT = DEFAULT_STANDALONE_DRAFT


def write_qwen2(
    directory: Path, shape: TinyLlamaShape = DEFAULT_QWEN2_TARGET, seed: int = 0
) -> Path:
    """Write a random ``Qwen2ForCausalLM`` (weights via transformers) plus its tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = tiny_models._llama_config(shape, "Qwen2ForCausalLM", Qwen2Config)
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).to(_torch_dtype(shape.dtype)).save_pretrained(str(directory))
    write_tokenizer(directory, shape.vocab)
    return directory


_WRITERS = {
    "standalone-draft": write_llama_target,
    "qwen2": write_qwen2,
    "mimo-v2-target": write_mimo_v2_target,
    "dflash-draft": write_dflash_draft,
    "gemma4-target": write_gemma4_target,
    "gemma4-assistant": write_gemma4_assistant,
}


def cached_model(kind: str, shape: Any, *, seed: int = 0, cache_root: Path | None = None) -> Path:
    """Return the cached checkpoint for ``(kind, shape, seed)``, generating it if absent."""
    return tiny_models.cached_model(
        kind,
        shape,
        seed=seed,
        cache_root=cache_root,
        writers=_WRITERS,
        generator_version=GENERATOR_VERSION,
    )


def tiny_standalone_draft(shape: TinyLlamaShape = DEFAULT_STANDALONE_DRAFT, **kw: Any) -> Path:
    """Cached STANDALONE draft: a full small Llama (own embed/lm_head, tokenizer included)."""
    return cached_model("standalone-draft", shape, **kw)


def tiny_mimo_v2_target(shape: TinyMiMoV2Shape = DEFAULT_MIMO_V2, **kw: Any) -> Path:
    """Cached MiMo-V2 target with ``shape.mtp_layers`` MTP layers in the same checkpoint."""
    return cached_model("mimo-v2-target", shape, **kw)


def tiny_dflash_draft(shape: TinyLlamaShape = DEFAULT_DFLASH_DRAFT, **kw: Any) -> Path:
    """Cached DFLASH draft for the default 2-layer tiny Llama target."""
    return cached_model("dflash-draft", shape, **kw)


def tiny_gemma4_target(shape: TinyGemma4Shape = DEFAULT_GEMMA4_TARGET, **kw: Any) -> Path:
    """Cached text-only Gemma 4 target (hybrid sliding/full attention, with tokenizer)."""
    return cached_model("gemma4-target", shape, **kw)


def tiny_gemma4_assistant(shape: TinyGemma4Shape = DEFAULT_GEMMA4_ASSISTANT, **kw: Any) -> Path:
    """Cached Gemma 4 assistant for :func:`tiny_gemma4_target` (a frozen-KV MTP draft)."""
    return cached_model("gemma4-assistant", shape, **kw)


def tiny_qwen2(shape: TinyLlamaShape = DEFAULT_QWEN2_TARGET, **kw: Any) -> Path:
    """Cached tiny ``Qwen2ForCausalLM`` (with tokenizer); pass ``DEFAULT_QWEN2_DRAFT`` for the
    STANDALONE draft."""
    return cached_model("qwen2", shape, **kw)
