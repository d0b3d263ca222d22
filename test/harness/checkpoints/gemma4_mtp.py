"""A tiny text-only Gemma 4 target and its assistant (SGLang's frozen-KV MTP draft), weights
from transformers' own Gemma 4 classes (so the tensor names are the published ones)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.checkpoints.llama_layout import BOS_ID, EOS_ID, Kind, TinyShape, save_seeded_model


@dataclass(frozen=True)
class TinyGemma4Shape(TinyShape):
    """Geometry of a tiny Gemma 4 text target or Gemma 4 assistant (frozen-KV MTP draft)."""

    layer_types: tuple[str, ...] = ("sliding_attention", "full_attention")
    sliding_window: int = 128
    backbone_hidden: int = 64

    @property
    def layers(self) -> int:
        return len(self.layer_types)


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


def write_gemma4_target(directory: Path, shape: TinyGemma4Shape, seed: int) -> Path:
    """Write a random text-only ``Gemma4ForCausalLM`` (``model_type: gemma4_text``)."""
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    config = Gemma4TextConfig(**_gemma4_text_config_kwargs(shape))
    config.architectures = ["Gemma4ForCausalLM"]
    fields = {"swa_num_key_value_heads": shape.kv_heads}
    fields.update(dict.fromkeys(("swa_head_dim", "swa_v_head_dim", "v_head_dim"), shape.head_dim))
    return save_seeded_model(directory, shape, seed, lambda: Gemma4ForCausalLM(config), **fields)


def write_gemma4_assistant(directory: Path, shape: TinyGemma4Shape, seed: int) -> Path:
    """Write a random ``Gemma4AssistantForCausalLM`` (the frozen-KV MTP draft) via transformers."""
    from transformers.models.gemma4_assistant.configuration_gemma4_assistant import (
        Gemma4AssistantConfig,
    )
    from transformers.models.gemma4_assistant.modeling_gemma4_assistant import (
        Gemma4AssistantForCausalLM,
    )

    config = Gemma4AssistantConfig(
        text_config=_gemma4_text_config_kwargs(shape),
        backbone_hidden_size=shape.backbone_hidden,
        use_ordered_embeddings=False,
    )
    config.architectures = ["Gemma4AssistantForCausalLM"]
    return save_seeded_model(
        directory, shape, seed, lambda: Gemma4AssistantForCausalLM(config), tokenizer=False
    )


# Cached text-only Gemma 4 target (hybrid sliding/full attention, with tokenizer).
tiny_gemma4_target = Kind("gemma4-target", write_gemma4_target, 2, DEFAULT_GEMMA4_TARGET)
# Cached Gemma 4 assistant for :func:`tiny_gemma4_target` (a frozen-KV MTP draft).
tiny_gemma4_assistant = Kind(
    "gemma4-assistant", write_gemma4_assistant, 2, DEFAULT_GEMMA4_ASSISTANT
)
