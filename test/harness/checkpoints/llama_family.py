"""Tiny Llama-architecture checkpoints: the suite's default target, its STANDALONE draft, and
the Qwen2 target and draft of SGLang's STANDALONE and NGRAM recipes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from harness.checkpoints.llama_layout import Kind, TinyLlamaShape, llama_config, save_seeded_model

DEFAULT_TARGET = TinyLlamaShape()
# A STANDALONE draft: fewer, narrower layers and a KV geometry unlike the target's
# (1 KV head of dim 24 against the target's 2 heads of dim 16), its own embedding and head.
DEFAULT_STANDALONE_DRAFT = replace(
    DEFAULT_TARGET,
    hidden=32,
    layers=1,
    heads=2,
    kv_heads=1,
    head_dim=24,
    intermediate=64,
)


def _writer(architecture: str, config_class: str = "LlamaConfig") -> Callable[..., Path]:
    """A writer of a random ``architecture`` (weights via transformers) plus its tokenizer."""

    def write(directory: Path, shape: TinyLlamaShape = DEFAULT_TARGET, seed: int = 0) -> Path:
        import transformers

        config = llama_config(shape, architecture, getattr(transformers, config_class))
        model = getattr(transformers, architecture)
        return save_seeded_model(directory, shape, seed, lambda: model(config))

    return write


write_llama_target = _writer("LlamaForCausalLM")
write_qwen2 = _writer("Qwen2ForCausalLM", "Qwen2Config")


# Cached tiny Llama target (with tokenizer).
tiny_llama_target = Kind("llama-target", write_llama_target, 1, DEFAULT_TARGET)
# Cached STANDALONE draft: a full small Llama (own embed/lm_head, tokenizer included).
tiny_standalone_draft = Kind("standalone-draft", write_llama_target, 2, DEFAULT_STANDALONE_DRAFT)
# Cached tiny ``Qwen2ForCausalLM`` (with tokenizer); DEFAULT_STANDALONE_DRAFT shapes its draft.
tiny_qwen2 = Kind("qwen2", write_qwen2, 2, DEFAULT_TARGET)
