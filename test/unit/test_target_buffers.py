"""The target's rotary cos/sin cache in the offline plan (``planner/target_buffers.py``)."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
from sglang_specinit.planner.cli import main
from sglang_specinit.planner.shipped_examples import EXAMPLES_DIR
from sglang_specinit.planner.weights import read_checkpoint_sizes

os.environ["HF_HUB_OFFLINE"] = "1"

EXAMPLE = "llama31-8b-eagle3"
FP32, BF16 = 4, 2
CONFIG = json.loads((EXAMPLES_DIR / EXAMPLE / "target" / "config.json").read_text())
ROTARY_DIM = CONFIG["hidden_size"] // CONFIG["num_attention_heads"]  # head_dim 128


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code = main(["plan", "--example", EXAMPLE, "--json", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def llama8b_cache_rows() -> int:
    """Rows SGLang's reserve grows the cache to: the context (``max_position_embeddings``, no
    --context-length) plus steps x draft tokens x the safety factor plus the margin, rounded up
    to the alignment (``reserve_rope_cache_for_long_sequences``), read from SGLang's settings."""
    from sglang.srt.environ import envs

    example = json.loads((EXAMPLES_DIR / EXAMPLE / "example.json").read_text())["launch"]
    align = envs.SGLANG_ROPE_CACHE_ALIGN.get()
    wanted = (
        CONFIG["max_position_embeddings"]
        + example["speculative_num_steps"]
        * example["speculative_num_draft_tokens"]
        * envs.SGLANG_SPEC_EXPANSION_SAFETY_FACTOR.get()
        + envs.SGLANG_ROPE_CACHE_SAFETY_MARGIN.get()
    )
    return -(-wanted // align) * align


def test_the_rope_cache_is_part_of_the_target_s_resident_bytes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = plan_json(capsys)
    expected = llama8b_cache_rows() * ROTARY_DIM * FP32
    assert data["target_buffers"]["bytes"] == expected
    checkpoint = read_checkpoint_sizes(str(EXAMPLES_DIR / EXAMPLE / "target")).total_bytes
    for column in (data, data["stock"]):
        assert column["target_weight_bytes"] == checkpoint + expected


def test_the_cache_dtype_answers_the_planned_device_not_this_host(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cuda = plan_json(capsys)["target_buffers"]
    cpu = plan_json(capsys, "--device", "cpu", "--device-memory", str(80 << 30))["target_buffers"]
    rows_x_dims = llama8b_cache_rows() * ROTARY_DIM
    assert (cuda["bytes"], cpu["bytes"]) == (rows_x_dims * FP32, rows_x_dims * BF16)
    assert "float32" in cuda["items"][0] and "bfloat16" in cpu["items"][0]


def test_the_text_plan_names_the_buffer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--example", EXAMPLE]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "target buffers not in the checkpoint" in x)
    assert "rotary cos/sin cache" in line and "MiB" in line


def test_building_leaves_sglang_s_rope_state_as_it_was(capsys: pytest.CaptureFixture[str]) -> None:
    from sglang.srt.layers.rotary_embedding import base, factory, rope_variant

    before = (factory._ROPE_DICT, dict(factory._ROPE_DICT), base._is_cuda, base._is_cpu)
    get_device = rope_variant.get_device
    plan_json(capsys)
    cache, contents, is_cuda, is_cpu = before
    assert factory._ROPE_DICT is cache and factory._ROPE_DICT == contents
    assert (base._is_cuda, base._is_cpu) == (is_cuda, is_cpu)
    assert rope_variant.get_device is get_device


def test_a_family_whose_rope_was_not_read_gets_one_note() -> None:
    from sglang_specinit.planner.target_buffers import target_buffers

    model_config = SimpleNamespace(hf_config=SimpleNamespace(architectures=["MambaForCausalLM"]))
    buffers = target_buffers(SimpleNamespace(device="cuda"), model_config)
    assert buffers.bytes == 0
    (note,) = buffers.notes
    assert note.startswith("MambaForCausalLM: the rotary cos/sin cache") and "not priced" in note


def test_a_rope_the_factory_refuses_is_a_note_not_a_crash() -> None:
    import torch
    from sglang_specinit.planner.target_buffers import target_buffers

    hf_config = SimpleNamespace(
        architectures=["LlamaForCausalLM"],
        hidden_size=64,
        num_attention_heads=4,
        head_dim=16,
        max_position_embeddings=128,
        rope_theta=10000.0,
        rope_scaling={"rope_type": "no-such-scaling", "factor": 2.0},
    )
    server_args = SimpleNamespace(
        device="cuda",
        rl_on_policy_target=None,
        context_length=None,
        speculative_num_steps=None,
        speculative_num_draft_tokens=None,
    )
    model_config = SimpleNamespace(hf_config=hf_config, dtype=torch.bfloat16)
    buffers = target_buffers(server_args, model_config)
    assert buffers.bytes == 0
    (note,) = buffers.notes
    assert "could not build" in note and "no-such-scaling" in note
