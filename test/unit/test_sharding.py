"""Checkpoint bytes per TP rank (``planner.sharding``), tensor by tensor.

The live counterpart (planner equals every parameter byte both ranks of a TP 2 server hold) is
``test/shared/test_tp2_ranks.py::test_plan_tp2_equals_what_both_ranks_allocate``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sglang_specinit.planner.sharding import (
    ShardLayout,
    draft_layout,
    rank_tensor_bytes,
    sizes_on_rank,
)
from sglang_specinit.planner.weights import CheckpointSizes

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


def test_kv_heads_are_replicated_once_there_are_fewer_than_ranks() -> None:
    one_kv_head = SimpleNamespace(num_key_value_heads=1)
    k = "model.layers.0.self_attn.k_proj.weight"
    assert rank_tensor_bytes(k, 2048, 16, one_kv_head, TP2) == 2048
    eight = SimpleNamespace(num_key_value_heads=8)
    assert rank_tensor_bytes(k, 8192, 64, eight, ShardLayout.uniform(4)) == 2048
    # Under dp-attention a model built on the attention-TP group splits attention over it.
    attn_tp_1 = ShardLayout(tp_size=2, attention_tp_size=1, embed_tp_size=2, lm_head_tp_size=2)
    assert rank_tensor_bytes(k, 4096, 32, CONFIG, attn_tp_1) == 4096
    assert rank_tensor_bytes("model.layers.0.mlp.up_proj.weight", 4096, 32, CONFIG, attn_tp_1) == (
        2048
    )


def test_a_complete_checkpoint_is_summed_per_tensor_and_a_partial_one_noted() -> None:
    tensors = {"model.norm.weight": 100, "model.layers.0.mlp.up_proj.weight": 1000}
    complete = CheckpointSizes(1100, "headers", tensors, complete=True)
    on_rank, notes = sizes_on_rank(complete, CONFIG, TP2)
    assert (on_rank.total_bytes, notes) == (600, ())
    partial = CheckpointSizes(5100, "model.safetensors.index.json", tensors)
    on_rank, notes = sizes_on_rank(partial, CONFIG, TP2)
    assert on_rank.total_bytes == 600 + 2000
    assert "does not list every tensor" in notes[0]
    assert sizes_on_rank(complete, CONFIG, ShardLayout.uniform(1)) == (complete, ())


def test_an_eagle3_draft_under_dp_attention_sits_whole_on_the_attention_tp_group() -> None:
    args = SimpleNamespace(tp_size=4, enable_dp_attention=True, enable_dp_lm_head=False)
    assert draft_layout(args, "EAGLE3", CONFIG, attn_tp_size=2) == ShardLayout.uniform(2)
    args.enable_dp_attention = False
    assert draft_layout(args, "EAGLE3", CONFIG, attn_tp_size=4) == ShardLayout.uniform(4)
