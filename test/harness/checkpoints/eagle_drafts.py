"""Tiny drafts that read the tiny Llama target's hidden states: EAGLE, EAGLE3 and DFLASH."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.checkpoints.llama_family import DEFAULT_TARGET
from harness.checkpoints.llama_layout import (
    Kind,
    TinyLlamaShape,
    layer_tensors,
    llama_config,
    randn,
    save_checkpoint,
    seeded_generator,
)

# EAGLE3's KV geometry is unlike the target's (1 KV head of dim 48 against 2 of dim 16), so neither
# "same as the target" nor "target cell * draft layers / target layers" prices it right.
DEFAULT_EAGLE_DRAFT = replace(DEFAULT_TARGET, layers=1)
DEFAULT_EAGLE3_DRAFT = replace(DEFAULT_TARGET, layers=1, kv_heads=1, head_dim=48)
# For TP 2: 2 KV heads of dim 48, so that (like the target's 2 heads of dim 16) its KV heads are
# split across two ranks instead of replicated; still a geometry unlike the target's.
TP2_EAGLE3_DRAFT = replace(DEFAULT_EAGLE3_DRAFT, kv_heads=2)
# DFLASH: one layer of 2 KV heads of dim 32 (256 B/token, the target's 128 B/token/layer), so the
# 0.5.13 rule "scale the target cell by (T + D) / T" underprices it.
DEFAULT_DFLASH_DRAFT = replace(DEFAULT_TARGET, layers=1, heads=4, kv_heads=2, head_dim=32)
DFLASH_BLOCK_SIZE = 4


def write_eagle_draft(directory: Path, shape: TinyLlamaShape, seed: int) -> Path:
    """Write a random ``LlamaForCausalLMEagle`` draft (EAGLE-1/2 layout; usually 1 layer)."""
    import torch

    directory, gen, dt = seeded_generator(directory, shape, seed)
    tensors = {
        "embed_tokens.weight": randn(gen, shape.vocab, shape.hidden, dtype=dt),
        "fc.weight": randn(gen, shape.hidden, 2 * shape.hidden, dtype=dt),
        "fc.bias": torch.zeros(shape.hidden, dtype=dt),
    }
    for i in range(shape.layers):
        # SGLang deletes layer 0's input_layernorm (EAGLE feeds fc output straight in).
        tensors.update(
            layer_tensors(gen, f"layers.{i}", shape, qkv_in=shape.hidden, input_layernorm=i > 0)
        )
    return save_checkpoint(directory, tensors, llama_config(shape, "LlamaForCausalLMEagle"))


def write_eagle3_draft(
    directory: Path,
    shape: TinyLlamaShape = DEFAULT_EAGLE3_DRAFT,
    seed: int = 0,
    *,
    draft_vocab: int | None = None,
    num_nextn_predict_layers: int | None = None,
) -> Path:
    """Write a random ``LlamaForCausalLMEagle3`` draft (usually 1 layer)."""
    import torch

    directory, gen, dt = seeded_generator(directory, shape, seed)
    dv = draft_vocab or shape.vocab
    tensors = {
        "fc.weight": randn(gen, shape.hidden, 3 * shape.hidden, dtype=dt),
        "norm.weight": torch.ones(shape.hidden, dtype=dt),
        "lm_head.weight": randn(gen, dv, shape.hidden, dtype=dt),
    }
    for i in range(shape.layers):
        # Layer 0 reads [embeds, fc(target hidden)] (2H wide); published 1-layer checkpoints
        # name it "midlayer", which SGLang maps to "layers.0".
        prefix = "midlayer" if shape.layers == 1 else f"layers.{i}"
        qkv_in = 2 * shape.hidden if i == 0 else shape.hidden
        tensors.update(
            layer_tensors(gen, prefix, shape, qkv_in=qkv_in, input_layernorm=True, hidden_norm=True)
        )
    if dv < shape.vocab:
        # d2t[i] = target_id - draft_id for the i-th hot token; here the hot tokens are the
        # first ``dv`` ids, so the offsets are zero and t2d marks those ids.
        tensors["d2t"] = torch.zeros(dv, dtype=torch.int64)
        tensors["t2d"] = torch.arange(shape.vocab) < dv
    extra: dict[str, Any] = {"draft_vocab_size": dv}
    if num_nextn_predict_layers is not None:
        extra["num_nextn_predict_layers"] = num_nextn_predict_layers
    return save_checkpoint(
        directory, tensors, llama_config(shape, "LlamaForCausalLMEagle3", **extra)
    )


def write_dflash_draft(directory: Path, shape: TinyLlamaShape, seed: int) -> Path:
    """Write a random ``DFlashDraftModel`` (``models/dflash.py``) reading target layers 0, 1."""
    import torch

    directory, gen, dt = seeded_generator(directory, shape, seed)
    h = shape.hidden
    tensors: dict[str, Any] = {
        "norm.weight": torch.ones(h, dtype=dt),
        "hidden_norm.weight": torch.ones(h, dtype=dt),
        "fc.weight": randn(gen, h, 2 * h, dtype=dt),
    }
    for i in range(shape.layers):
        tensors.update(layer_tensors(gen, f"layers.{i}", shape, qkv_in=h, input_layernorm=True))
        tensors[f"layers.{i}.self_attn.q_norm.weight"] = torch.ones(shape.head_dim, dtype=dt)
        tensors[f"layers.{i}.self_attn.k_norm.weight"] = torch.ones(shape.head_dim, dtype=dt)
    dflash_config = {
        "target_layer_ids": [0, 1],
        "num_target_layers": DEFAULT_TARGET.layers,
        "block_size": DFLASH_BLOCK_SIZE,
        "mask_token_id": 3,
    }
    config = llama_config(
        shape, "DFlashDraftModel", dflash_config=dflash_config, block_size=DFLASH_BLOCK_SIZE
    )
    return save_checkpoint(directory, tensors, config)


def own_lm_head_problems(report: dict[str, Any]) -> list[str]:
    """Why the live EAGLE3 draft's ``lm_head`` (in a report with its tensor report) is not its
    checkpoint's ``lm_head.weight``: another tensor's storage, shape or values; empty if it is."""
    from safetensors import safe_open

    from harness.reports.fidelity_tensors import _digest as tensor_digest

    live = report["tensors"]["draft0/lm_head.weight"]
    (draft,) = [r for r in report["model_runners"] if r["role"] == "draft"]
    with safe_open(str(Path(draft["model_path"]) / "model.safetensors"), "pt") as f:
        stored = f.get_tensor("lm_head.weight")
    problems = []
    if live["owner"] != "draft0/lm_head.weight":
        problems.append(f"the draft's lm_head is {live['owner']}'s storage")
    if live["shape"] != list(stored.shape):
        problems.append(f"shape {live['shape']}, the checkpoint's {list(stored.shape)}")
    elif live["sha256"] != tensor_digest(stored):
        problems.append("values differ from the checkpoint's lm_head.weight")
    return problems


# Cached tiny EAGLE draft matching a target of the same ``hidden``/``vocab``.
tiny_eagle_draft = Kind("eagle-draft", write_eagle_draft, 1, DEFAULT_EAGLE_DRAFT)
# Cached tiny EAGLE3 draft; by default its KV geometry differs from the target's.
tiny_eagle3_draft = Kind("eagle3-draft", write_eagle3_draft, 1, DEFAULT_EAGLE3_DRAFT)
# Cached DFLASH draft for the default 2-layer tiny Llama target.
tiny_dflash_draft = Kind("dflash-draft", write_dflash_draft, 2, DEFAULT_DFLASH_DRAFT)
