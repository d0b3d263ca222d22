"""An MTP draft read from its target's checkpoint: its weights are what that checkpoint holds
under the MTP layer, split as SGLang's NextN loader splits them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from harness.checkpoints.tiny_configs import deepseek_v3, glm4_moe
from safetensors.torch import save_file
from sglang_specinit.planner.gpus import DeviceSpec
from sglang_specinit.planner.plan import OfflinePlan, build_plan
from sglang_specinit.planner.releases import installed_replay

TP = 2
VOCAB = 250  # not a multiple of 64: the tables the draft allocates are padded to 256 rows
HIDDEN = 64
BF16 = 2
WHOLE = 0  # a tensor every rank holds in full
GIB = 1 << 30


def _config(kind: str) -> dict[str, Any]:
    config = {"deepseek-v3": deepseek_v3, "glm-4.6": glm4_moe, "glm-4.5": glm4_moe}[kind]()
    config.update(vocab_size=VOCAB, hidden_size=HIDDEN)
    return config


def _dense_mlp(c: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], int]]:
    i, h = c["intermediate_size"], c["hidden_size"]
    # MergedColumnParallelLinear gate_up, RowParallelLinear down: 1 / tp.
    return {
        "mlp.gate_proj.weight": ((i, h), TP),
        "mlp.up_proj.weight": ((i, h), TP),
        "mlp.down_proj.weight": ((h, i), TP),
    }


def _moe_mlp(c: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], int]]:
    h, i, e = c["hidden_size"], c["moe_intermediate_size"], c["n_routed_experts"]
    shared = i * c["n_shared_experts"]
    tensors: dict[str, tuple[tuple[int, ...], int]] = {
        "mlp.gate.weight": ((e, h), WHOLE),  # the router, ReplicatedLinear
        "mlp.gate.e_score_correction_bias": ((e,), WHOLE),
        "mlp.shared_experts.gate_proj.weight": ((shared, h), TP),
        "mlp.shared_experts.up_proj.weight": ((shared, h), TP),
        "mlp.shared_experts.down_proj.weight": ((h, shared), TP),
    }
    for expert in range(e):  # FusedMoE under TP: every expert split 1 / tp
        tensors[f"mlp.experts.{expert}.gate_proj.weight"] = ((i, h), TP)
        tensors[f"mlp.experts.{expert}.up_proj.weight"] = ((i, h), TP)
        tensors[f"mlp.experts.{expert}.down_proj.weight"] = ((h, i), TP)
    return tensors


def _attention(kind: str, c: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], int]]:
    h, heads = c["hidden_size"], c["num_attention_heads"]
    if kind == "deepseek-v3":  # MLA
        q, kv, rope, v = c["q_lora_rank"], c["kv_lora_rank"], c["qk_rope_head_dim"], c["v_head_dim"]
        nope = c["qk_nope_head_dim"]
        return {
            "self_attn.q_a_proj.weight": ((q, h), WHOLE),  # ReplicatedLinear
            "self_attn.q_a_layernorm.weight": ((q,), WHOLE),
            "self_attn.q_b_proj.weight": ((heads * (nope + rope), q), TP),
            "self_attn.kv_a_proj_with_mqa.weight": ((kv + rope, h), WHOLE),  # ReplicatedLinear
            "self_attn.kv_a_layernorm.weight": ((kv,), WHOLE),
            "self_attn.kv_b_proj.weight": ((heads * (nope + v), kv), TP),
            "self_attn.o_proj.weight": ((h, heads * v), TP),
        }
    d, kv_heads = c["head_dim"], c["num_key_value_heads"]
    assert kv_heads % TP == 0  # QKVParallelLinear then splits the KV heads too
    return {
        "self_attn.q_proj.weight": ((heads * d, h), TP),
        "self_attn.q_proj.bias": ((heads * d,), TP),
        "self_attn.k_proj.weight": ((kv_heads * d, h), TP),
        "self_attn.k_proj.bias": ((kv_heads * d,), TP),
        "self_attn.v_proj.weight": ((kv_heads * d, h), TP),
        "self_attn.v_proj.bias": ((kv_heads * d,), TP),
        "self_attn.o_proj.weight": ((h, heads * d), TP),
        "self_attn.q_norm.weight": ((d,), WHOLE),
        "self_attn.k_norm.weight": ((d,), WHOLE),
    }


def _decoder_layer(kind: str, c: dict[str, Any], moe: bool) -> dict[str, Any]:
    h = c["hidden_size"]
    return {
        "input_layernorm.weight": ((h,), WHOLE),
        "post_attention_layernorm.weight": ((h,), WHOLE),
        **_attention(kind, c),
        **(_moe_mlp(c) if moe else _dense_mlp(c)),
    }


def _mtp_layer(kind: str, c: dict[str, Any]) -> dict[str, Any]:
    """The MTP layer's tensors the draft loads (local names), with their split."""
    h = c["hidden_size"]
    return {
        **_decoder_layer(kind, c, moe=True),
        "enorm.weight": ((h,), WHOLE),
        "hnorm.weight": ((h,), WHOLE),
        "eh_proj.weight": ((h, 2 * h), WHOLE),  # nn.Linear in DeepseekModelNextN / GLM's
        "shared_head.norm.weight": ((h,), WHOLE),
    }


def _rank_bytes(tensors: dict[str, Any]) -> int:
    total = 0
    for shape, split in tensors.values():
        n = BF16 * int(torch.Size(shape).numel())
        total += n if split == WHOLE else n // split
    return total


def build_checkpoint(directory: Path, kind: str) -> tuple[str, int]:
    """A tiny ``kind`` checkpoint (config + safetensors) and its MTP layer's expected bytes on
    one of ``TP`` ranks."""
    c = _config(kind)
    layers, h = c["num_hidden_layers"], c["hidden_size"]
    tensors = {
        "model.embed_tokens.weight": (VOCAB, h),
        "lm_head.weight": (VOCAB, h),
        "model.norm.weight": (h,),
    }
    for i in range(layers):
        moe = i >= c["first_k_dense_replace"]
        for name, (shape, _) in _decoder_layer(kind, c, moe).items():
            tensors[f"model.layers.{i}.{name}"] = shape
    mtp = f"model.layers.{layers}."
    loaded = _mtp_layer(kind, c)
    for name, (shape, _) in loaded.items():
        tensors[mtp + name] = shape
    if kind in ("deepseek-v3", "glm-4.5"):  # the copies these published checkpoints store
        tensors[mtp + "embed_tokens.weight"] = (VOCAB, h)
        tensors[mtp + "shared_head.head.weight"] = (VOCAB, h)
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(c))
    save_file(
        {k: torch.zeros(shape, dtype=torch.bfloat16) for k, shape in tensors.items()},
        str(directory / "model.safetensors"),
    )
    return str(directory), _rank_bytes(loaded)


def plan_nextn(model_path: str) -> OfflinePlan:
    """``NEXTN`` without a draft path (the draft is the target's own MTP layer), TP 2."""
    replay = installed_replay()
    flags = "--speculative-algorithm NEXTN --speculative-num-steps 1 --speculative-eagle-topk 1"
    flags += f" --speculative-num-draft-tokens 2 --tp-size {TP} --mem-fraction-static 0.5"
    args = replay.parse_launch(["--model-path", model_path, *flags.split()])
    device = DeviceSpec("test device", 8 * GIB, 7 * GIB)
    return build_plan(args, device, replay)


def own_tables_bytes() -> int:
    """The embedding and head the NextN draft model allocates itself, on one rank: 250 rows
    padded to 256 (``pad_vocab_size``), split over ``TP``, bf16."""
    return 2 * (256 // TP) * HIDDEN * BF16


@pytest.mark.parametrize("kind", ["deepseek-v3", "glm-4.6"])
def test_draft_bytes_are_the_layers_tensors_as_the_loader_splits_them(
    tmp_path: Path, kind: str
) -> None:
    path, expected = build_checkpoint(tmp_path / kind, kind)
    plan = plan_nextn(path)
    draft = plan.ours.inputs.draft
    assert draft is not None
    assert plan.ours.plan.draft_weight_bytes == draft.weight_bytes == expected
    # The draft's own embedding and head, allocated whatever the checkpoint stores.
    assert draft.shared_weight_bytes == own_tables_bytes()


def test_stored_copies_change_nothing_resident(tmp_path: Path) -> None:
    both, expected = build_checkpoint(tmp_path / "glm-4.5", "glm-4.5")
    neither, _ = build_checkpoint(tmp_path / "glm-4.6", "glm-4.6")
    with_copies, without = plan_nextn(both).ours, plan_nextn(neither).ours
    for column in (with_copies, without):
        assert column.plan.draft_weight_bytes == expected
        assert column.inputs.draft is not None
        assert column.inputs.draft.shared_weight_bytes == own_tables_bytes()
    assert with_copies.plan.target_weight_bytes == without.plan.target_weight_bytes
