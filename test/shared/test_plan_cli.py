"""The command line: ``plan`` end to end on the shipped examples (offline, with the target's
unstored buffers) and its edges, on both generations (bad input: test_plan_bad_input.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from types import SimpleNamespace

import pytest
from harness.geometry.specs import attention_kv_spec
from harness.planner_cli import plan_json, run_cli
from harness.releases import installed_row
from sglang_specinit import compat
from sglang_specinit.budget import BudgetInputs, DraftSpec, make_plan, plan_pools
from sglang_specinit.planner.cli import EXIT_CLOSED_PIPE, main
from sglang_specinit.planner.columns import STOCK_RULE
from sglang_specinit.planner.shipped_examples import EXAMPLES_DIR
from sglang_specinit.report import human_bytes, plan_to_dict

GIB = 1 << 30
MIB = 1 << 20
os.environ["HF_HUB_OFFLINE"] = "1"
# adapter -> stock's automatic fraction for DeepSeek-V3 MTP on an H200 at TP 8 (0.5.13.x adds
# its 4096 MiB EAGLE reserve).
DEEPSEEK_STOCK_FRACTION = {"sglang_0_5_13": 0.858, "sglang_0_5_23": 0.886}


def fresh_process(*argv: str, stdout: int = subprocess.PIPE, **env: str):
    """``sglang-specinit *argv`` run by a fresh interpreter, with ``env`` added to this one's."""
    return subprocess.run(
        [sys.executable, "-m", "sglang_specinit.planner.cli", *argv],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def rope_state() -> tuple:
    from sglang.srt.layers.rotary_embedding import base, factory, rope_variant

    cache = factory._ROPE_DICT
    return id(cache), dict(cache), base._is_cuda, base._is_cpu, rope_variant.get_device


# The target's rotary cos/sin cache, which no checkpoint stores (planner/target_buffers.py):
# SGLang's reserve grows it to the context (131072 positions) + 3 steps * 4 draft tokens * 2
# (the safety factor) + a 256 margin, rounded up to 128 rows: 131456, x head_dim 128.
ROPE_ROWS_X_DIMS = 131_456 * 128


def _llama8b_inputs(fraction: float) -> BudgetInputs:
    """The default example rebuilt by hand from its public shapes (no planner code)."""
    heads = {"num_kv_heads": 8, "head_dim": 128, "v_head_dim": 128}
    return BudgetInputs(
        # H100-80GB: 81559 MiB total, minus the planner's 1 GiB CUDA-context allowance
        pre_load_free_bytes=81559 * MIB - GIB,
        mem_fraction_static=fraction,
        # 32 layers * 8 KV heads * (128 + 128) * 2 bytes
        target_kv=attention_kv_spec(num_layers=32, **heads),
        # 8_030_261_248 bf16 parameters, plus the rotary cache in fp32 (CUDA keeps it in fp32)
        target_weight_bytes=16_060_522_496 + ROPE_ROWS_X_DIMS * 4,
        page_size=1,
        context_len=131072,
        draft=DraftSpec(
            algorithm="EAGLE3",
            # one fp16 layer with the target's head geometry
            kv_pools=(attention_kv_spec(num_layers=1, kv_dtype="float16", **heads),),
            # the draft keeps its 32000-token head (draft_vocab_size set): nothing subtracted
            weight_bytes=849_763_584,
            # the embedding it allocates and then binds to the target's: 128256 * 4096 * 2
            shared_weight_bytes=1_050_673_152,
            upstream_reserved_layers=1,
        ),
        # handle_speculative_decoding sets 48 when --max-running-requests is not given
        max_running_requests=48,
    )


def test_default_plan_is_the_installed_stock_beside_ours_and_matches_independent_inputs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planning (the target's rotary cache built) leaves SGLang's rope state as it was."""
    if installed_row().adapter != "sglang_0_5_13":
        pytest.skip("0.5.13.x's figures (0.5.23's: test_planner_0523.py)")
    llama = plan_json("--example", "llama31-8b-eagle3")  # the default example
    before = rope_state()
    code, out, err = run_cli(["plan"])
    assert code == 0, err
    header = next(line for line in out.splitlines() if "sglang-specinit" in line)
    assert header.split() == ["stock", "0.5.13.post1", "sglang-specinit"]
    assert "0.5.14" not in out
    assert "min viable --mem-fraction-static" in out and "llama31-8b-eagle3" in out
    lines = out.splitlines()
    line = next(x for x in lines if "target buffers not in the checkpoint" in x)
    assert "rotary cos/sin cache" in line and "MiB" in line
    # The reserve only in the column that has one; stock's headroom marked over budget.
    reserve = next(x for x in lines if x.startswith("auto-fraction draft reserve")).split()
    assert reserve[-3:] == [*human_bytes(llama["stock"]["spec_reserve_bytes"]).split(), "-"]
    (headroom,) = [x for x in lines if x.startswith("headroom")]
    assert "(over budget)" in headroom
    # The JSON's release is the text's (test_report_command's plan --json check).
    data = plan_json()
    assert data == llama
    assert [k for k in data if isinstance(data[k], dict) and "tokens" in data[k]] == ["stock"]
    assert plan_json("--sglang-version", "0.5.13.post1") == data
    # The CPU engine switch (a shell set up for the CPU tests) does not move a GPU plan, in this
    # process or in a fresh one (the console entry point).
    from sglang.srt.utils.common import is_cpu

    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "1")
    is_cpu.cache_clear()
    try:
        assert is_cpu()
        assert plan_json() == data
        assert is_cpu()
    finally:
        monkeypatch.undo()
        is_cpu.cache_clear()
    result = fresh_process("plan", "--json", HF_HUB_OFFLINE="1", SGLANG_USE_CPU_ENGINE="1")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == data
    assert rope_state() == before
    # Automatic fraction, 0.5.13.post1 heuristic on 81559 MiB (H100): reserved MiB =
    # 512 + 8192 * 1.5 + 256 * 2 + 1 * 1 / 8 * 1024 + 58 piecewise sizes * 8 = 13904;
    # 0.5.14 / this package: round((81559 - 13904) / 81559, 3) = 0.83;
    # stock adds the 4096 MiB EAGLE term: round((81559 - 18000) / 81559, 3) = 0.779.
    ours_inputs, stock_inputs = _llama8b_inputs(0.83), _llama8b_inputs(0.779)
    # Stock 0.5.13.post1 sizes the target's pool before the draft loads: the budget left by
    # the target's weights over the target's 131072-byte cell; the draft lands on top.
    target_w, draft_w = stock_inputs.target_weight_bytes, stock_inputs.draft.weight_bytes
    free = stock_inputs.pre_load_free_bytes
    tokens = (int(0.779 * free) - target_w) // 131072
    stock = make_plan(
        "stock-0.5.13.post1", stock_inputs, tokens, target_w + draft_w, 131072, target_w / free
    )
    expected = {
        "specinit": plan_to_dict(plan_pools(ours_inputs), ours_inputs, 1),
        # The stock column's rule names its source, whatever the release.
        "stock": {**plan_to_dict(stock, stock_inputs, 1), "rule": STOCK_RULE},
    }
    got = {"specinit": llama, "stock": llama["stock"]}
    for rule, want in expected.items():
        for key, value in want.items():
            assert got[rule][key] == value, (rule, key)
    assert (llama["mem_fraction_static"], llama["stock"]["mem_fraction_static"]) == (0.83, 0.779)
    # The reserve the stock heuristic held back: budget(0.83) - budget(0.779)
    assert llama["stock"]["spec_reserve_bytes"] == (
        int(0.83 * (81559 * MIB - GIB)) - int(0.779 * (81559 * MIB - GIB))
    )
    # The rotary cache's dtype answers the planned device, not this host; sizes for it are read.
    memory = ("--device-memory", "80GiB", "--pre-load-free-bytes", "70GiB")
    on_cpu = plan_json("--example", "llama31-8b-eagle3", "--device", "cpu", *memory)
    assert (on_cpu["device"]["total_bytes"], on_cpu["pre_load_free_bytes"]) == (80 * GIB, 70 * GIB)
    cuda, cpu = llama["target_buffers"], on_cpu["target_buffers"]
    assert (cuda["bytes"], cpu["bytes"]) == (ROPE_ROWS_X_DIMS * 4, ROPE_ROWS_X_DIMS * 2)
    assert "float32" in cuda["items"][0] and "bfloat16" in cpu["items"][0]


def test_deepseek_mtp_drafts_from_its_own_checkpoint() -> None:
    """Twice: 0.5.13.post1's path-less MTP draft renames SGLang's cached hf config in place."""
    data = plan_json("--example", "deepseek-v3-mtp")
    assert plan_json("--example", "deepseek-v3-mtp") == data
    target = str(EXAMPLES_DIR / "deepseek-v3-mtp" / "target")
    # NEXTN resolves to EAGLE; DeepseekV3ForCausalLM gets its own path as the draft.
    assert data["speculative_algorithm"] == "EAGLE"
    assert data["speculative_draft_model_path"] == target
    assert data["tp_size"] == 8
    # (688_574_839_360 total - 15_424_227_552 in model.layers.61.) / 8 ranks, plus the rotary
    # cos/sin cache every rank holds whole: deepseek_yarn's 4096 x 40 = 163840 positions
    # + 3 steps * 4 draft tokens * 2 + 256, rounded up to 128 rows, x 64 rope dims in fp32
    assert data["target_weight_bytes"] == 84_143_826_476 + 164_224 * 64 * 4
    # (15_424_227_552 - 2 * 1_853_358_080 embed/head copies) / 8, rounded up
    assert data["draft_weight_bytes"] == 1_464_688_924
    assert data["target_kv_bytes_per_token"] == 70272  # (512 + 64) * 61 * 2, not split by TP
    assert data["draft_kv_bytes_per_token"] == 1152  # (512 + 64) * 1 * 2
    # 143771 MiB, tp 8: 512 + 12288 + 512 * 2 + 8 / 8 * 1024 + 1536 (MLA) = 16384 reserved
    assert data["mem_fraction_static"] == 0.886  # round(127387 / 143771, 3)
    # 0.5.13.x: round(123291 / 143771, 3)
    stock_fraction = DEEPSEEK_STOCK_FRACTION[installed_row().adapter]
    assert data["stock"]["mem_fraction_static"] == stock_fraction


def test_user_flags_override_example() -> None:
    # A preset's name in any case.
    flags = "--mem-fraction-static 0.9 --page-size 64 --max-total-tokens 100000 --gpu h200-141gb"
    data = plan_json("--example", "llama31-8b-eagle3", *flags.split())
    assert data["mem_fraction_static"] == data["stock"]["mem_fraction_static"] == 0.9
    assert data["tokens"] == 99968  # page_floor(100000, 64)
    assert data["page_size"] == 64
    assert data["pre_load_free_bytes"] == 143771 * MIB - GIB
    assert "spec_reserve_bytes" not in data["stock"]  # the user chose the fraction


LLAMA = str(EXAMPLES_DIR / "llama31-8b-eagle3" / "target")


def test_a_path_less_eagle_draft_is_built_from_the_target_checkpoint() -> None:
    plan = plan_json("--model-path", LLAMA, "--speculative-algorithm", "NEXTN")
    assert plan["speculative_draft_model_path"] == LLAMA
    # A note on the launch's inputs: it holds for both columns.
    assert [n["column"] for n in plan["notes"] if "no draft path" in n["text"]] == ["both"]
    # A Llama has no MTP head: the draft runner allocates the whole model's layers.
    assert plan["draft_kv_bytes_per_token"] == plan["target_kv_bytes_per_token"]


def test_a_rope_not_read_or_refused_by_the_factory_is_one_note_not_a_crash() -> None:
    import torch
    from sglang_specinit.planner.target_buffers import target_buffers

    mamba = SimpleNamespace(hf_config=SimpleNamespace(architectures=["MambaForCausalLM"]))
    buffers = target_buffers(SimpleNamespace(device="cuda"), mamba)
    (note,) = buffers.notes
    assert buffers.bytes == 0
    assert note.startswith("MambaForCausalLM: the rotary cos/sin cache") and "not priced" in note
    config = SimpleNamespace(
        architectures=["LlamaForCausalLM"],
        hidden_size=64,
        num_attention_heads=4,
        head_dim=16,
        max_position_embeddings=128,
        rope_theta=10000.0,
        rope_scaling={"rope_type": "no-such-scaling", "factor": 2.0},
    )
    unset = "rl_on_policy_target context_length speculative_num_steps speculative_num_draft_tokens"
    server_args = SimpleNamespace(device="cuda", **dict.fromkeys(unset.split()))
    buffers = target_buffers(server_args, SimpleNamespace(hf_config=config, dtype=torch.bfloat16))
    (note,) = buffers.notes
    assert buffers.bytes == 0 and "could not build" in note and "no-such-scaling" in note


def test_version_and_patches_help_name_the_installed_sglang_and_the_served_releases() -> None:
    code, out, _ = run_cli(["--version"])
    assert code == 0
    installed = compat.installed_sglang_version()
    adapter = compat.decide_for_version(installed).adapter
    assert (
        out == f"sglang-specinit {version('sglang-specinit')}; sglang {installed} "
        f"(served by {adapter})\n"
    )
    result = fresh_process("patches", "--help", COLUMNS="400")
    assert result.returncode == 0, result.stderr
    assert ", ".join(compat.supported_releases()) in result.stdout


def test_a_closed_pipe_ends_quietly() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = fresh_process("patches", stdout=write_end)
    finally:
        os.close(write_end)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == EXIT_CLOSED_PIPE


def test_a_missing_sgl_kernel_is_one_line_and_any_other_missing_module_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """0.5.16 - 0.5.18's memory pool imports sgl_kernel's ops at import (a GPU-less host)."""
    from sglang_specinit.planner import cli as planner_cli

    def no_module(*_args: object) -> None:
        raise ModuleNotFoundError(f"No module named '{missing}'", name=missing)

    monkeypatch.setattr(planner_cli, "_plan", no_module)
    missing = "x"
    with pytest.raises(ModuleNotFoundError):
        main(["plan"])
    missing = "sgl_kernel"
    code, _, err = run_cli(["plan"])
    (line,) = err.splitlines()
    assert code == 2 and "imports sgl_kernel" in line and "sglang-kernel" in line
