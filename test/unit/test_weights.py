"""Checkpoint sizes, draft/target sharing rules, bytes per TP rank (an MTP draft's too), sizes."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from harness.checkpoints.llama_layout import TinyLlamaShape, llama_config, save_checkpoint
from harness.checkpoints.tiny_configs import CONFIGS
from harness.planner_cli import plan_json
from safetensors.torch import save_file
from sglang_specinit.planner.gpus import DeviceSpec, parse_bytes
from sglang_specinit.planner.plan import build_plan
from sglang_specinit.planner.releases import installed_replay
from sglang_specinit.planner.sharding import (
    ShardLayout,
    draft_layout,
    rank_tensor_bytes,
    sizes_on_rank,
)
from sglang_specinit.planner.weights import (
    EMBED,
    LM_HEAD,
    CheckpointSizes,
    WeightsError,
    mtp_layer_prefixes,
    read_checkpoint_sizes,
    shared_tensor_names,
    split_mtp_from_target,
    split_separate_draft,
)


def test_sizes_from_headers_a_summary_an_index_a_bin_file_or_no_weights(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    save_file({"a": torch.zeros(3, 5, dtype=torch.bfloat16)}, str(shards / "m-1.safetensors"))
    save_file(
        {"b": torch.zeros(7, dtype=torch.float32), "model.layers.3.x": torch.zeros(2, 2)},
        str(shards / "m-2.safetensors"),
    )
    sizes = read_checkpoint_sizes(str(shards))
    assert sizes.complete
    assert sizes.tensor_bytes == {"a": 30, "b": 28, "model.layers.3.x": 16}  # 15*2, 7*4, 4*4
    assert sizes.total_bytes == 74
    assert sizes.under_prefix("model.layers.3.") == 16
    # A weights-size.json summary wins over the headers.
    summary = {"total_bytes": 99, "tensors": {EMBED: 10}, "groups": {"model.layers.1.": 20}}
    (shards / "weights-size.json").write_text(json.dumps(summary))
    sizes = read_checkpoint_sizes(str(shards))
    assert (sizes.total_bytes, sizes.tensor(EMBED)) == (99, 10)
    assert sizes.under_prefix("model.layers.1.") == 20
    index = {"metadata": {"total_size": 123456}, "weight_map": {"a": "m-1.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    sizes = read_checkpoint_sizes(str(tmp_path))
    assert sizes.total_bytes == 123456
    assert sizes.under_prefix("model.layers.3.") is None  # no per-tensor sizes
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "pytorch_model.bin").write_bytes(b"\0" * 1000)
    assert read_checkpoint_sizes(str(tmp_path / "bin")).total_bytes == 1000
    (tmp_path / "none").mkdir()
    with pytest.raises(WeightsError, match="no weights found"):
        read_checkpoint_sizes(str(tmp_path / "none"))


def test_shared_tensor_rules() -> None:
    for algorithm, config, shared in [
        ("EAGLE3", {"tie_word_embeddings": False, "draft_vocab_size": 32000}, (EMBED,)),
        # No draft vocabulary: LlamaForCausalLMEagle3 loads the head from the target.
        ("EAGLE3", {"draft_vocab_size": None}, (EMBED, LM_HEAD)),
        ("EAGLE3", {"draft_vocab_size": 32000, "load_lm_head_from_target": True}, (EMBED, LM_HEAD)),
        ("EAGLE", {}, (EMBED, LM_HEAD)),
        ("EAGLE", {"tie_word_embeddings": True}, (EMBED,)),
        ("STANDALONE", {}, ()),
        ("DFLASH", {}, ()),
    ]:
        assert shared_tensor_names(algorithm, SimpleNamespace(**config)) == shared, config


def parts(split) -> tuple[int, int, int]:
    return (split.target_bytes, split.draft_bytes, split.draft_shared_bytes)


def test_separate_draft_split() -> None:
    target = CheckpointSizes(total_bytes=1000, source="t")
    # An EAGLE checkpoint stores its embedding as ``embed_tokens.weight`` (the loader adds the
    # ``model.`` prefix): the same tensor, so the same split.
    for name in (EMBED, "embed_tokens.weight"):
        draft = CheckpointSizes(total_bytes=300, source="d", tensor_bytes={name: 100})
        # The stored embedding moves to shared; the head the checkpoint lacks is estimated (50).
        split = split_separate_draft(target, draft, (EMBED, LM_HEAD), {EMBED: 999, LM_HEAD: 50})
        assert parts(split) == (1000, 200, 150), name


def test_mtp_split_from_target_checkpoint() -> None:
    config = SimpleNamespace(num_hidden_layers=61)
    prefixes = mtp_layer_prefixes(config, 1)
    assert prefixes == ("model.layers.61.",)
    layer = {"model.layers.61.eh_proj.weight": 700}
    copies = {
        "model.layers.61.embed_tokens.weight": 300,
        "model.layers.61.shared_head.head.weight": 200,
    }
    # The draft model's own embedding + head (what it allocates), 450 here.
    stores_both = CheckpointSizes(10_000, "s", {**layer, **copies}, complete=True)
    stores_neither = CheckpointSizes(9_500, "s", layer, complete=True)
    # target skips layer 61; the loader skips the copies; the draft's own tables are shared
    for stored in (stores_both, stores_neither):
        assert parts(split_mtp_from_target(stored, prefixes, 450)) == (8_800, 700, 450), stored
    unknown = split_mtp_from_target(CheckpointSizes(10_000, "index"), prefixes, 450)
    assert parts(unknown) == (10_000, 0, 450)
    assert unknown.notes
    empty = split_mtp_from_target(CheckpointSizes(1_000, "s", {}, complete=True), prefixes, 450)
    assert "holds no tensor under model.layers.61." in empty.notes[0]
    other = split_mtp_from_target(stores_both, prefixes, 450, "Qwen3NextForCausalLMMTP")
    assert "Qwen3NextForCausalLMMTP" in other.notes[0]
    assert not split_mtp_from_target(stores_both, prefixes, 450, "GlmMoeDsaForCausalLMNextN").notes


@pytest.mark.parametrize(
    ("text", "value"),
    [("80GiB", 80 << 30), ("141GB", 141_000_000_000), ("24000MiB", 24000 << 20)]
    + [("1.5 GiB", 3 << 29), ("123", 123)]
    + [(text, None) for text in ("", "lots", "80XB", "0", "-1GiB")],  # refused
)
def test_parse_bytes(text: str, value: int | None) -> None:
    with pytest.raises(ValueError) if value is None else nullcontext():
        assert parse_bytes(text) == value


def _checkpoint(directory: Path, config: dict, shapes: dict[str, tuple[int, ...]]) -> str:
    """``config`` and bf16 zero tensors of ``shapes`` written to ``directory``."""
    directory.mkdir()
    tensors = {k: torch.zeros(shape, dtype=torch.bfloat16) for k, shape in shapes.items()}
    return str(save_checkpoint(directory, tensors, json.dumps(config)))


def test_plan_reads_real_safetensors_checkpoints(tmp_path: Path) -> None:
    # A 2-layer bf16 Llama: hidden 64, 4 heads, 2 KV heads, head_dim 16, vocab 256.
    shape = TinyLlamaShape(vocab=256, max_position_embeddings=4096)
    base = llama_config(shape, "LlamaForCausalLM").to_dict()
    target = _checkpoint(
        tmp_path / "target",
        base,
        # 32768 + 32768 + 8192 bytes
        {EMBED: (256, 64), LM_HEAD: (256, 64), "model.layers.0.w": (64, 64)},
    )
    draft = _checkpoint(
        tmp_path / "draft",
        {**base, "architectures": ["LlamaForCausalLMEagle"], "num_hidden_layers": 1},
        # a stored embedding copy (replaced by the target's) + 8192 bytes
        {EMBED: (256, 64), "model.layers.0.w": (64, 64)},
    )
    flags = (
        "--speculative-algorithm EAGLE --speculative-num-steps 1 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 2 --device-memory 2GiB --mem-fraction-static 0.5"
    ).split()
    data = plan_json("--model-path", target, "--speculative-draft-model-path", draft, *flags)
    # The target's rotary cos/sin cache, which no checkpoint stores (planner/target_buffers.py):
    # (4096 positions + 1 step * 2 draft tokens * 2 + 256) rounded up to 128 rows = 4480,
    # x head_dim 16, fp32 on CUDA.
    rope = 4480 * 16 * 4
    assert data["target_buffers"]["bytes"] == rope
    assert data["target_weight_bytes"] == 73728 + rope  # checkpoint: 32768 * 2 + 8192
    assert data["draft_weight_bytes"] == 8192  # embed copy excluded
    assert data["target_kv_bytes_per_token"] == 256  # 2 heads * (16 + 16) * 2 layers * 2 bytes
    assert data["draft_kv_bytes_per_token"] == 128  # 2 * 32 * 1 layer * 2
    # Stock 0.5.13.post1 profiles before the draft loads: the target's bytes alone
    # (0.5.14+ also hold the draft's embed copy then: their own environments' tests).
    stock = data["stock"]
    assert stock["min_viable_mem_fraction_static"] == pytest.approx(
        (73728 + rope) / (2 * (1 << 30) - (1 << 30)), abs=1e-6
    )


# Checkpoint bytes per TP rank (``planner.sharding``), tensor by tensor. The live counterpart is
# test/shared/test_tp2_ranks.py::test_plan_tp2_equals_what_both_ranks_allocate.

CONFIG = SimpleNamespace(num_key_value_heads=2, num_attention_heads=4, vocab_size=32001)
TP2 = ShardLayout.uniform(2)


@pytest.mark.parametrize(
    ("name", "nbytes", "rows", "on_rank"),
    [
        ("model.layers.0.input_layernorm.weight", 128, 64, 128),
        ("model.norm.weight", 128, 64, 128),
        ("midlayer.hidden_norm.weight", 128, 64, 128),
        ("fc.weight", 24576, 64, 24576),
        ("d2t", 800, 100, 800),
        ("model.layers.0.self_attn.o_proj.bias", 128, 64, 128),
        ("model.layers.0.mlp.gate.weight", 1024, 8, 1024),
        # A NextN layer's eh_proj is an nn.Linear (deepseek_nextn.py, glm4_moe_nextn.py).
        ("model.layers.61.eh_proj.weight", 32768, 128, 32768),
        # Nemotron-H's MTP eh_proj is a ColumnParallelLinear.
        ("mtp.layers.0.eh_proj.weight", 32768, 128, 16384),
        # 32001 rows padded to 32064 (a multiple of 64), then halved.
        ("model.embed_tokens.weight", 32001 * 128, 32001, 16032 * 128),
        ("lm_head.weight", 32001 * 128, 32001, 16032 * 128),
        ("model.layers.0.self_attn.q_proj.weight", 8192, 64, 4096),
        ("model.layers.0.self_attn.k_proj.weight", 4096, 32, 2048),
        ("model.layers.0.self_attn.o_proj.weight", 8192, 64, 4096),
        ("model.layers.0.mlp.down_proj.weight", 16384, 64, 8192),
    ],
)
def test_each_tensor_is_priced_by_the_layer_that_loads_it(
    name: str, nbytes: int, rows: int, on_rank: int
) -> None:
    assert rank_tensor_bytes(name, nbytes, rows, CONFIG, TP2) == on_rank


def test_kv_heads_checkpoint_totals_and_eagle3_draft_layout_per_rank() -> None:
    # KV heads are replicated once there are fewer than ranks.
    one_kv_head = SimpleNamespace(num_key_value_heads=1)
    k, up = "model.layers.0.self_attn.k_proj.weight", "model.layers.0.mlp.up_proj.weight"
    assert rank_tensor_bytes(k, 2048, 16, one_kv_head, TP2) == 2048
    eight = SimpleNamespace(num_key_value_heads=8)
    assert rank_tensor_bytes(k, 8192, 64, eight, ShardLayout.uniform(4)) == 2048
    # Under dp-attention a model built on the attention-TP group splits attention over it.
    attn_tp_1 = ShardLayout(tp_size=2, attention_tp_size=1, embed_tp_size=2, lm_head_tp_size=2)
    assert rank_tensor_bytes(k, 4096, 32, CONFIG, attn_tp_1) == 4096
    assert rank_tensor_bytes(up, 4096, 32, CONFIG, attn_tp_1) == 2048
    # A complete checkpoint is summed per tensor, a partial one noted.
    tensors = {"model.norm.weight": 100, up: 1000}
    complete = CheckpointSizes(1100, "headers", tensors, complete=True)
    on_rank, notes = sizes_on_rank(complete, CONFIG, TP2)
    assert (on_rank.total_bytes, notes) == (600, ())
    partial = CheckpointSizes(5100, "model.safetensors.index.json", tensors)
    on_rank, notes = sizes_on_rank(partial, CONFIG, TP2)
    assert on_rank.total_bytes == 600 + 2000
    assert "does not list every tensor" in notes[0]
    assert sizes_on_rank(complete, CONFIG, ShardLayout.uniform(1)) == (complete, ())
    # An EAGLE3 draft under dp-attention sits whole on the attention-TP group.
    args = SimpleNamespace(tp_size=4, enable_dp_attention=True, enable_dp_lm_head=False)
    assert draft_layout(args, "EAGLE3", CONFIG, attn_tp_size=2) == ShardLayout.uniform(2)
    args.enable_dp_attention = False
    assert draft_layout(args, "EAGLE3", CONFIG, attn_tp_size=4) == ShardLayout.uniform(4)


# An MTP draft read from its target's checkpoint: its weights are what that checkpoint holds
# under the MTP layer, split as SGLang's NextN loader splits them.

TP = 2
VOCAB = 250  # not a multiple of 64: the tables the draft allocates are padded to 256 rows
HIDDEN = 64
BF16 = 2
WHOLE = 0  # a tensor every rank holds in full


def _mlp(prefix: str, i: int, h: int) -> dict[str, tuple[tuple[int, ...], int]]:
    # MergedColumnParallelLinear gate_up, RowParallelLinear down: 1 / tp.
    shapes = {"gate_proj": (i, h), "up_proj": (i, h), "down_proj": (h, i)}
    return {f"{prefix}.{proj}.weight": (shape, TP) for proj, shape in shapes.items()}


def _moe_mlp(c: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], int]]:
    h, i, e = c["hidden_size"], c["moe_intermediate_size"], c["n_routed_experts"]
    tensors: dict[str, tuple[tuple[int, ...], int]] = {
        "mlp.gate.weight": ((e, h), WHOLE),  # the router, ReplicatedLinear
        "mlp.gate.e_score_correction_bias": ((e,), WHOLE),
        **_mlp("mlp.shared_experts", i * c["n_shared_experts"], h),
    }
    for expert in range(e):  # FusedMoE under TP: every expert split 1 / tp
        tensors.update(_mlp(f"mlp.experts.{expert}", i, h))
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
    tensors = {}
    for proj, n in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
        tensors[f"self_attn.{proj}_proj.weight"] = ((n * d, h), TP)
        tensors[f"self_attn.{proj}_proj.bias"] = ((n * d,), TP)
    return {
        **tensors,
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
        **(_moe_mlp(c) if moe else _mlp("mlp", c["intermediate_size"], h)),
    }


def build_checkpoint(directory: Path, kind: str) -> tuple[str, int]:
    """A tiny ``kind`` checkpoint (config + safetensors) and its MTP layer's expected bytes on
    one of ``TP`` ranks: the tensors the draft loads (local names), with their split."""
    c = CONFIGS["glm4-moe" if kind.startswith("glm-4.") else kind]()
    c.update(vocab_size=VOCAB, hidden_size=HIDDEN)
    layers, h = c["num_hidden_layers"], c["hidden_size"]
    tensors = {EMBED: (VOCAB, h), LM_HEAD: (VOCAB, h), "model.norm.weight": (h,)}
    for i in range(layers):
        moe = i >= c["first_k_dense_replace"]
        for name, (shape, _) in _decoder_layer(kind, c, moe).items():
            tensors[f"model.layers.{i}.{name}"] = shape
    mtp = f"model.layers.{layers}."
    loaded = {
        **_decoder_layer(kind, c, moe=True),
        "enorm.weight": ((h,), WHOLE),
        "hnorm.weight": ((h,), WHOLE),
        "eh_proj.weight": ((h, 2 * h), WHOLE),  # nn.Linear in DeepseekModelNextN / GLM's
        "shared_head.norm.weight": ((h,), WHOLE),
    }
    expected = 0
    for name, (shape, split) in loaded.items():
        tensors[mtp + name] = shape
        n = BF16 * int(torch.Size(shape).numel())
        expected += n if split == WHOLE else n // split
    if kind in ("deepseek-v3", "glm-4.5"):  # the copies these published checkpoints store
        tensors[mtp + "embed_tokens.weight"] = (VOCAB, h)
        tensors[mtp + "shared_head.head.weight"] = (VOCAB, h)
    return _checkpoint(directory, c, tensors), expected


def test_draft_bytes_are_the_layers_tensors_as_the_loader_splits_them(tmp_path: Path) -> None:
    """``NEXTN`` without a draft path, TP 2: deepseek-v3 and glm-4.5 store embedding/head copies
    under the MTP layer, glm-4.6 not; nothing resident changes with them."""
    replay = installed_replay()
    flags = "--speculative-algorithm NEXTN --speculative-num-steps 1 --speculative-eagle-topk 1"
    flags += f" --speculative-num-draft-tokens 2 --tp-size {TP} --mem-fraction-static 0.5"
    columns = {}
    for kind in ("deepseek-v3", "glm-4.5", "glm-4.6"):
        path, expected = build_checkpoint(tmp_path / kind, kind)
        args = replay.parse_launch(["--model-path", path, *flags.split()])
        device = DeviceSpec("test device", 8 << 30, 7 << 30)
        columns[kind] = column = build_plan(args, device, replay).ours
        draft = column.inputs.draft
        assert draft is not None
        assert column.plan.draft_weight_bytes == draft.weight_bytes == expected, kind
        # The embedding and head the NextN draft model allocates itself whatever the checkpoint
        # stores, on one rank: 250 rows padded to 256 (pad_vocab_size), split over TP, bf16.
        assert draft.shared_weight_bytes == 2 * (256 // TP) * HIDDEN * BF16, kind
    target_bytes = {k: columns[k].plan.target_weight_bytes for k in ("glm-4.5", "glm-4.6")}
    assert target_bytes["glm-4.5"] == target_bytes["glm-4.6"]
