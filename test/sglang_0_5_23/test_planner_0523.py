"""``sglang-specinit plan`` and ``report`` with 0.5.23's own logic, in this process on cpu,
plus two fresh planner processes: this environment's and ``.venv``'s (0.5.13.post1)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from harness.checkpoints.published_configs import EXAMPLES, dsa_config_dir
from harness.planner_cli import plan_json, run_cli
from layouts import SPEC_CHAIN, made_dir, nnpl0_draft, published, resolved
from sglang_specinit.budget import kv_pool_bytes
from sglang_specinit.planner.gpus import DeviceSpec, get_preset, pre_load_free_bytes
from sglang_specinit.planner.inputs import PlanError
from sglang_specinit.planner.shipped_examples import list_examples
from sglang_specinit.sglang_0_5_23 import kernel_arch
from sglang_specinit.sglang_0_5_23 import planner_replay as release_0_5_23
from sglang_specinit.sglang_0_5_23 import pricing_host as pricing_host_0_5_23
from sglang_specinit.sglang_0_5_23.runtime_budget import price_configurators

pytestmark = pytest.mark.timeout(300)

MIB = 1 << 20
GIB = 1 << 30


@pytest.fixture(scope="module", autouse=True)
def fresh_processes() -> Iterator[dict[str, subprocess.Popen[str]]]:
    """Both fresh planners, started before in-process plans take the cores: this venv's (CPU-engine
    switch set, which the planner drops) and 0.5.13.post1's (found through the layering .pth)."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    main_site = Path((purelib / "zz-specinit-main-venv.pth").read_text().strip())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGLANG_USE_CPU_ENGINE")}
    launches = {
        "0.5.23": (sys.executable, {**env, "SGLANG_USE_CPU_ENGINE": "1"}),
        "0.5.13.post1": (str(main_site.parents[2] / "bin" / "python"), env),
    }
    procs = {
        which: subprocess.Popen(
            [python, "-m", "sglang_specinit.planner.cli", "plan", "--json"],
            env=penv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for which, (python, penv) in launches.items()
    }
    yield procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def fresh_plan(procs: dict[str, subprocess.Popen[str]], which: str) -> dict:
    out, err = procs[which].communicate(timeout=240)
    assert procs[which].returncode == 0, err[-3000:]
    return json.loads(out)


def fresh_python(script: str, *argv: str, **env: str) -> str:
    """``script``'s stdout in a fresh interpreter without PYTHONPATH and the CPU-engine switch."""
    drop = ("PYTHONPATH", "SGLANG_USE_CPU_ENGINE")
    env = {**{k: v for k, v in os.environ.items() if k not in drop}, **env}
    proc = subprocess.run(
        [sys.executable, "-c", script, *argv], env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def key_tree(value: object) -> object:
    """The nested key structure of a JSON value (values dropped)."""
    if isinstance(value, dict):
        return {k: key_tree(v) for k, v in value.items()}
    return None


@pytest.fixture(scope="module")
def default_plan() -> dict:
    """The default launch's plan (llama31-8b-eagle3), computed once for the tests reading it."""
    return plan_json()


# Every shipped example


# Examples whose pools have no warm-up copy: MLA, and DeepSeek-V4's own FP8 pools.
MLA_EXAMPLES = {"deepseek-v3-mtp", "deepseek-v4-flash-mtp"}


@pytest.mark.parametrize("example", list_examples())
def test_every_example_plans_with_0_5_23s_rule(
    monkeypatch: pytest.MonkeyPatch, example: str
) -> None:
    import sglang.kernels.ops.kvcache.cache_move as cache_move

    calls = []
    cpu_copy = cache_move.copy_all_layer_kv_cache_cpu
    monkeypatch.setattr(
        cache_move,
        "copy_all_layer_kv_cache_cpu",
        lambda *args: calls.append(args) or cpu_copy(*args),
    )
    # Keys, both columns' release and fit: test/shared/test_report_command.py.
    data = plan_json("--example", example)
    # Both columns run on the same fraction (0.5.23 has no flat speculative reserve).
    assert data["mem_fraction_static"] == data["stock"]["mem_fraction_static"]
    # Skipping the KV warm-up copy changes no price.
    assert calls == []
    monkeypatch.setattr(release_0_5_23, "kv_warm_up_copy_skipped", contextlib.nullcontext)
    assert plan_json("--example", example) == data
    # Each MHA pool (a hybrid SWA pool's parts too) runs the copy; MLA pools have none.
    assert bool(calls) == (example not in MLA_EXAMPLES), len(calls)


def test_v4_example_plans_as_the_layout_matrix_sizes_it(tmp_path: Path) -> None:
    from test_dsv4_sizing_hook import CELLS, evaluate

    data = plan_json("--example", "deepseek-v4-flash-mtp")
    stock = data["stock"]
    cell = dataclasses.replace(
        next(c for c in CELLS if c.name == "V4-Flash MTP, H200 FP4, TP 4"),
        mem_fraction_static=data["mem_fraction_static"],
    )
    # The duplicates stock holds while it profiles: the NextN draft's own embed and lm_head
    # (bf16, vocabulary-sharded), the matrix's figure; the plan's at-profile bytes show them.
    duplicates, free = cell.weights()[2], data["pre_load_free_bytes"]
    ours, stocks = (round(d["min_viable_mem_fraction_static"] * free) for d in (data, stock))
    assert abs(stocks - ours - duplicates) < 1e-6 * free
    weights = (data["target_weight_bytes"], data["draft_weight_bytes"], duplicates)
    r = evaluate(cell, tmp_path, weights=weights, budget=data["budget_bytes"])
    assert data["tokens"] == r.plugin_tokens and stock["tokens"] == r.stock_tokens
    # --json states bytes per token as whole bytes (int()).
    assert data["draft_kv_bytes_per_token"] == int(r.draft_per_row)
    assert stock["draft_kv_bytes_per_token"] == int(r.stock_reserve_per_row)
    assert data["target_kv_pool_bytes"] + data["draft_kv_pool_bytes"] <= (
        data["budget_bytes"] - data["resident_bytes"]
    )
    assert data["tokens"] > stock["tokens"]


def test_default_plan_here_and_in_fresh_processes_and_flags_only_0_5_23_accepts(
    fresh_processes: dict, default_plan: dict
) -> None:
    code, out, err = run_cli(["plan"])
    assert code == 0, err
    for text in ("stock 0.5.23", "sglang-specinit", "sglang 0.5.23", "llama31-8b-eagle3"):
        assert text in out
    assert "0.5.13" not in out and "0.5.14" not in out
    # The automatic fraction is 0.5.23's heuristic on the planned GPU.
    assert default_plan["mem_fraction_static"] == 0.83
    assert default_plan["pre_load_free_bytes"] == 81559 * MIB - GIB
    new = plan_json("--example", "llama31-70b-eagle-tp4", "--attn-dp-size", "2")
    old = plan_json("--example", "llama31-70b-eagle-tp4", "--dp-size", "2", "--enable-dp-attention")
    assert new == old
    assert new["max_running_requests"] == 24  # 48 split over two attention-DP groups
    fp8 = plan_json("--speculative-draft-kv-cache-dtype", "fp8_e4m3")
    assert fp8["draft_kv_bytes_per_token"] * 2 == default_plan["draft_kv_bytes_per_token"]
    assert fp8["target_kv_bytes_per_token"] == default_plan["target_kv_bytes_per_token"]
    # Fresh processes plan as this one: the CPU-engine switch does not move a GPU plan.
    assert os.environ.get("SGLANG_USE_CPU_ENGINE") == "1"
    assert fresh_plan(fresh_processes, "0.5.23") == default_plan
    assert os.environ.get("SGLANG_USE_CPU_ENGINE") == "1"  # this process's own is untouched
    # The same JSON and geometry as the 0.5.13.post1 environment's; its column adds its
    # automatic fraction's speculative reserve.
    here, there = dict(default_plan), fresh_plan(fresh_processes, "0.5.13.post1")
    stock_here, stock_there = here.pop("stock"), there.pop("stock")
    assert (stock_here["release"], stock_there["release"]) == ("0.5.23", "0.5.13.post1")
    reserve = {"spec_reserve_bytes", "spec_reserve_balance_bytes"}
    assert set(stock_there) - set(stock_here) == reserve and set(stock_here) < set(stock_there)
    assert key_tree(there) == key_tree(here)
    same = "target_weight_bytes draft_weight_bytes target_kv_bytes_per_token page_size"
    same += " draft_kv_bytes_per_token speculative_algorithm max_running_requests"
    for key in same.split():
        assert there[key] == here[key], key


# Every pool priced as the 0.5.23 server prices it


def _dsa_dir(tmp_path: Path) -> str:
    """DeepSeek-V3.2's config (DSA indexer) with DeepSeek-V3's checkpoint sizes."""
    directory = dsa_config_dir(made_dir(tmp_path / "dsa"))
    shutil.copy(EXAMPLES / "deepseek-v3-mtp" / "target" / "weights-size.json", directory)
    return str(directory)


LAUNCHES = {  # each example's launch as ServerArgs keyword arguments
    "deepseek-v3-mtp": dict(speculative_algorithm="NEXTN", tp_size=8, page_size=64, **SPEC_CHAIN),
    "llama31-8b-eagle3": {"speculative_algorithm": "EAGLE3", **SPEC_CHAIN},
}
DSA_DIR = {"model_path": _dsa_dir}
# name -> (the example, what the case adds to its launch: plan flags and ServerArgs fields alike,
# callables of a scratch dir resolved); H200 (sm_90) presets.
PRICED_LAYOUTS: dict[str, Any] = {
    "DeepSeek-V3.2 DSA fp8_e4m3, TP 8": (
        "deepseek-v3-mtp",
        {**DSA_DIR, "kv_cache_dtype": "fp8_e4m3"},
    ),
    "DeepSeek-V3.2 DSA bf16, TP 8": ("deepseek-v3-mtp", {**DSA_DIR, "kv_cache_dtype": "bfloat16"}),
    "DeepSeek-V3 dense MLA, TP 8 DCP 8": ("deepseek-v3-mtp", {"dcp_size": 8}),
    "llama31-8b + EAGLE3, num_nextn_predict_layers 0": (
        "llama31-8b-eagle3",
        {"speculative_draft_model_path": nnpl0_draft},
    ),
}


# Drafts stock under-reserves: (stock's reserve for the draft, the plan's price of it) B/row.
UNDER_RESERVED = {
    "DeepSeek-V3 dense MLA, TP 8 DCP 8": (1_152, 8 * 1_152),  # the draft replicated over DCP
    "llama31-8b + EAGLE3, num_nextn_predict_layers 0": (0, 4_096),
}


@pytest.mark.parametrize("name", list(PRICED_LAYOUTS))
def test_plan_prices_every_pool_with_the_servers_function(tmp_path: Path, name: str) -> None:
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    example, added = PRICED_LAYOUTS[name]
    added = resolved(added, tmp_path)
    flags = ["--example", example]
    flags += [x for k, v in added.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    # Built as the layout matrix builds it, priced by the server's function.
    args = {"model_path": str(EXAMPLES / example / "target"), **LAUNCHES[example], **added}
    kvc = published(args, tmp_path)
    target, drafts, fixed = price_configurators(kvc.target, kvc.drafts, [])
    assert fixed == 0
    page = int(kvc.target.page_size)
    data = plan_json(*flags)
    tokens = data["tokens"]
    assert data["page_size"] == page
    assert data["target_kv_bytes_per_token"] == int(target.bytes_per_token())
    assert data["draft_kv_bytes_per_token"] == int(sum(d.bytes_per_token() for d in drafts))
    assert data["target_kv_pool_bytes"] == kv_pool_bytes(target, tokens, page)
    assert data["draft_kv_pool_bytes"] == sum(kv_pool_bytes(d, tokens, page) for d in drafts)
    stock = data["stock"]
    # 0.5.23's own configurator's price per row.
    stock_cell = create_memory_pool_configurator(kvc.target)._cell_size
    assert stock["priced_kv_bytes_per_token"] == int(stock_cell)
    assert stock["target_kv_pool_bytes"] == kv_pool_bytes(target, stock["tokens"], page)
    assert data["used_bytes"] <= data["budget_bytes"]
    if name in UNDER_RESERVED:  # a draft stock under-reserves is planned as built
        reserve, draft = UNDER_RESERVED[name]
        assert stock["priced_kv_bytes_per_token"] - data["target_kv_bytes_per_token"] == reserve
        assert data["draft_kv_bytes_per_token"] == draft
        assert stock["used_bytes"] > stock["budget_bytes"] >= data["used_bytes"]
    if name == "DeepSeek-V3.2 DSA fp8_e4m3, TP 8":  # planned at 0.5.23's width
        assert flags[-2:] == ["--kv-cache-dtype", "fp8_e4m3"]
        bf16 = plan_json(*flags[:-1], "bfloat16")
        rows = [
            d["target_kv_bytes_per_token"] + d["draft_kv_bytes_per_token"] for d in (data, bf16)
        ]
        layers = 61 + 1  # DeepSeek-V3.2's layers and its MTP layer
        assert rows[1] - rows[0] == layers * (1_152 - 656)
        assert rows[0] == stock["priced_kv_bytes_per_token"]


# Launches whose resolved attention kernels cannot run on the planned GPU (kernel_arch.py), on
# the real sglang 0.5.23 resolution


@pytest.fixture(scope="module")
def dsa_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _dsa_dir(tmp_path_factory.mktemp("dsa-kernels"))


DSA = ("--example", "deepseek-v3-mtp", "--model-path", "<dsa>")
# The lines the DSA refusal relies on: the DCP override, the kernel call, flashinfer's arch check.
KA = kernel_arch
TRTLLM_LINES = tuple(map(str, (KA.DSA_DCP_PICKS_TRTLLM, KA.DSA_TRTLLM_KERNEL, KA.TRTLLM_GEN_ARCHS)))
DSA_DCP = (
    *("--dsa-decode-backend to 'trtllm' for --dcp-size 8", "sm_100/sm_103/sm_107"),
    "change --dcp-size",
)
# launch -> what its one-line refusal says, and how it ends ("": not checked).
REFUSED = {
    **{
        f"dsa-dcp-on-{gpu}": (
            (*DSA, "--dcp-size", "8", "--gpu", gpu),
            (*DSA_DCP, f"cannot run on {gpu} (sm_90)", *TRTLLM_LINES),
            "",
        )
        for gpu in ("H100-80GB", "H200-141GB")
    },
    "explicit-dsa-trtllm": (
        (*DSA, *"--dsa-decode-backend trtllm --kv-cache-dtype bfloat16 --gpu H200-141GB".split()),
        ("--dsa-decode-backend to 'trtllm' as the launch asks",),
        "change --dsa-decode-backend",
    ),
    "fa3-on-blackwell": (
        ("--attention-backend", "fa3", "--gpu", "B200"),
        (
            "--attention-backend to 'fa3' as the launch asks",
            "cannot run on B200 (sm_100)",
            f"sm_8x or sm_9x ({kernel_arch.FA3_ARCHS})",
        ),
        "change --attention-backend",
    ),
    "fa3-mla-on-ampere": (
        ("--example", "deepseek-v3-mtp", "--attention-backend", "fa3", "--gpu", "A100-80GB"),
        ("cannot run on A100-80GB (sm_80)", "runs only on sm_9x"),
        "change --attention-backend",
    ),
}


@pytest.mark.parametrize(("argv", "says", "ends"), REFUSED.values(), ids=REFUSED)
def test_a_kernel_the_planned_gpu_cannot_run_is_refused_in_one_line(
    dsa_dir: str, argv: tuple, says: tuple, ends: str
) -> None:
    line = run_cli(["plan", *(str(dsa_dir) if a == "<dsa>" else a for a in argv)]).refusal_line()
    assert line.startswith("sglang-specinit plan: error: sglang 0.5.23 resolves "), line
    assert line.endswith(ends) and all(text in line for text in says), line


# DeepSeek-V3.2 at TP 8, DCP 8 with its MTP draft, as the launch flags resolved.
DSA_DCP_MTP = (
    "--model-path <dsa> --tp 8 --dcp-size 8 --speculative-algorithm NEXTN "
    "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
).split()
TRTLLM = [("dsa_decode_backend", "trtllm"), ("dsa_prefill_backend", "trtllm")]
FA3, FA3_NEED = ("--attention-backend", "fa3"), ("attention_backend", "fa3")
# launch -> (its GPU, the plan's flags, the flags resolved, the kernels resolved, an sm they
# cannot run on); <dsa>, <llama>: the checkpoints.
RUNS = {
    "dsa-dcp-on-B200": ("B200", (*DSA, "--dcp-size", "8"), DSA_DCP_MTP, TRTLLM, 90),
    **{
        f"fa3-on-{gpu}": (gpu, FA3, ("--model-path", "<llama>", *FA3), [FA3_NEED], 100)
        for gpu in ("H100-80GB", "L40S")
    },
}


@pytest.mark.parametrize("name", list(RUNS))
def test_a_kernel_the_planned_gpu_runs_plans(dsa_dir: str, name: str) -> None:
    gpu, argv, launch, kernels, not_on = RUNS[name]
    paths = {"<dsa>": dsa_dir, "<llama>": str(EXAMPLES / "llama31-8b-eagle3" / "target")}
    preset = get_preset(gpu)
    free = pre_load_free_bytes(preset.total_bytes)
    device = DeviceSpec(preset.name, preset.total_bytes, free, sm=preset.sm)
    replay = release_0_5_23.REPLAY
    resolved = replay.resolve(replay.parse_launch([paths.get(a, a) for a in launch]), device)
    mla = resolved.target_model_config.attention_arch.name == "MLA"
    needs = kernel_arch.kernel_needs(resolved.args, resolved.launch_inputs, mla=mla)
    assert [(n.field, n.value) for n in needs] == kernels
    assert all(n.runs_on(preset.sm) and not n.runs_on(not_on) for n in needs)
    argv = (*(paths.get(a, a) for a in argv), "--gpu", gpu, "--json")
    assert run_cli(["plan", *argv]).json()["tokens"] > 0


@pytest.mark.parametrize("source", kernel_arch.SOURCES, ids=str)
def test_each_cited_line_says_what_the_rule_relies_on(source: kernel_arch.Source) -> None:
    import sglang

    spec = importlib.util.find_spec(source.wheel.split()[0])
    if spec is None or spec.origin is None:
        pytest.skip(f"{source.wheel} is not installed here (the planner needs none)")
    root = Path(spec.origin).parents[1]
    if source.wheel.startswith("sglang") and sglang.__version__ != kernel_arch.READ_IN:
        pytest.skip(f"the lines are {kernel_arch.READ_IN}'s; installed {sglang.__version__}")
    lines = (root / source.path).read_text().splitlines()
    assert source.text in lines[source.line - 1], (str(source), lines[source.line - 1])


def test_a_fraction_the_weights_do_not_fit_is_refused_as_the_server_refuses_it() -> None:
    line = run_cli(["plan", "--mem-fraction-static", "0.1"]).refusal_line()
    assert "leave no room for the KV cache under --mem-fraction-static=0.1" in line
    suggested = float(line.split("Pass --mem-fraction-static ")[1].split()[0])
    assert plan_json("--mem-fraction-static", str(suggested))["tokens"] > 0


def test_a_hip_xpu_or_fp32_switch_host_does_not_set_the_planned_dtype(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The planner's rotary-cache dtype answers the planned device alone."""
    from sglang.srt.layers.rotary_embedding import base

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(base, "_is_hip", True)
    monkeypatch.setattr(base, "_is_xpu", True)
    monkeypatch.setenv("SGLANG_ROPE_CACHE_FP32", "1")
    (cpu,), (cuda,) = (
        plan_json("--example", "llama31-8b-eagle3", *argv)["target_buffers"]["items"]
        for argv in (("--device", "cpu", "--device-memory", str(80 << 30)), ())
    )
    assert cpu.endswith("bfloat16") and cuda.endswith("float32")
    assert (base._is_hip, base._is_xpu) == (True, True)
    assert os.environ["SGLANG_ROPE_CACHE_FP32"] == "1"


def test_default_is_the_installed_0_5_23_and_imports_no_sglang() -> None:
    """``patches`` without ``--release`` lists the installed 0.5.23, importing no SGLang."""
    code = (
        "import json, sys\n"
        "from sglang_specinit.planner.cli import main\n"
        "code = main(['patches'])\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('sglang.', 'torch')))\n"
        "print(json.dumps([code, loaded]))\n"
    )
    out = fresh_python(code).splitlines()
    assert json.loads(out[-1]) == [0, []]
    code, listed, _err = run_cli(["patches", "--release", "0.5.23"])
    assert code == 0 and out[:-1] == listed.splitlines()
    assert out[0].startswith("sglang 0.5.23: adapter sglang_specinit.sglang_0_5_23,")


# Where the sglang 0.5.23 planner builds its pricing pools (``pricing_host``) and what it then
# needs from ``sgl_kernel``: here (no GPU) cpu, with no ``sgl_kernel`` without the CPU engine, its
# CPU op with it; on a CUDA host (a TEST DOUBLE: ``torch.cuda.is_available``) any that imports.

# A fresh planner process, before SGLang is imported: the host decision and the CLI's switch.
FRESH_DECISION = """
import json, os, sys
import torch
from sglang_specinit.planner import cli
from sglang_specinit.sglang_0_5_23.pricing_host import pricing_device

out = {"device": pricing_device()}
cli._set_host_cpu_engine()
out["cpu_engine"] = os.environ.get("SGLANG_USE_CPU_ENGINE")
torch.cuda.is_available = lambda: True  # TEST DOUBLE: a CUDA host
os.environ["SGLANG_USE_CPU_ENGINE"] = "1"  # inherited from a shell: the CLI decides anyway
out["device_on_cuda_host"] = pricing_device()
cli._set_host_cpu_engine()
out["cpu_engine_on_cuda_host"] = os.environ.get("SGLANG_USE_CPU_ENGINE")
out["sglang_imported"] = "sglang" in sys.modules
print(json.dumps(out))
"""

needs_gpu_less_host = pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the GPU-less branch; this host has CUDA"
)


@needs_gpu_less_host
def test_fresh_planner_process_prices_on_cpu_without_cuda() -> None:
    expected = dict(device="cpu", cpu_engine=None, device_on_cuda_host="cuda")
    expected.update(cpu_engine_on_cuda_host=None, sglang_imported=False)
    assert json.loads(fresh_python(FRESH_DECISION)) == expected


def test_a_cuda_host_keeps_cpu_after_a_cpu_engine_import_and_needs_only_sgl_kernel(
    monkeypatch: pytest.MonkeyPatch, stub_kernel: object
) -> None:
    """A process whose pool modules took CPU kernels at import prices on cpu even with CUDA;
    one pricing on CUDA needs only an importable sgl_kernel (not the CPU engine's op)."""
    import sglang.srt.server_args  # noqa: F401  (this suite imports SGLang as a CPU engine)

    assert os.environ.get("SGLANG_USE_CPU_ENGINE") == "1"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # TEST DOUBLE: CUDA host
    assert pricing_host_0_5_23.pricing_device() == "cpu"
    monkeypatch.delenv("SGLANG_USE_CPU_ENGINE")
    assert pricing_host_0_5_23.pricing_device() == "cuda"
    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "1")  # CUDA pricing ignores the switch
    monkeypatch.setattr(pricing_host_0_5_23, "pricing_device", lambda: "cuda")
    monkeypatch.delattr(stub_kernel, "copy_all_layer_kv_cache_cpu")
    pricing_host_0_5_23.require_sgl_kernel()
    monkeypatch.setitem(sys.modules, "sgl_kernel", None)  # `import sgl_kernel` now fails
    with pytest.raises(PlanError) as refused:
        pricing_host_0_5_23.require_sgl_kernel()
    message = str(refused.value)
    assert "on this host's GPU (torch sees CUDA)" in message, message
    assert "sgl_kernel (the sglang-kernel package), but it does not import" in message, message
    assert "\n" not in message


@pytest.fixture
def stub_kernel() -> object:
    import sgl_kernel

    assert getattr(sgl_kernel, "IS_SPECINIT_TEST_DOUBLE", False)  # this suite's named double
    return sgl_kernel


@needs_gpu_less_host
def test_cpu_needs_the_cpu_op_as_a_cpu_engine_and_no_sgl_kernel_without(
    monkeypatch: pytest.MonkeyPatch, stub_kernel: object
) -> None:
    # A CPU engine without the CPU op exits 2 naming the CPU-engine case.
    monkeypatch.delattr(stub_kernel, "copy_all_layer_kv_cache_cpu")
    line = run_cli(["plan", "--json"]).refusal_line()
    for part in (
        "on cpu (torch sees no CUDA device)",
        "runs sglang as a CPU engine (SGLANG_USE_CPU_ENGINE=1)",
        "no CPU ops (copy_all_layer_kv_cache_cpu)",
        "unset SGLANG_USE_CPU_ENGINE before sglang is imported",
    ):
        assert part in line, line
    monkeypatch.setitem(sys.modules, "sgl_kernel", None)  # `import sgl_kernel` now fails
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.delenv("SGLANG_USE_CPU_ENGINE")
    pricing_host_0_5_23.require_sgl_kernel()
    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "1")
    with pytest.raises(PlanError, match="the sgl_kernel package is not installed"):
        pricing_host_0_5_23.require_sgl_kernel()


def test_the_skip_is_only_the_self_copy_and_ends_with_its_context() -> None:
    from sgl_kernel import StubKernelCalled
    from sglang.srt.mem_cache import memory_pool

    original = memory_pool.copy_all_layer_kv_cache_func
    zeros, one = torch.zeros(4, dtype=torch.int64), torch.ones(4, dtype=torch.int64)
    with pricing_host_0_5_23.kv_warm_up_copy_skipped():
        stand_in = memory_pool.copy_all_layer_kv_cache_func
        assert stand_in is not original
        stand_in(torch.zeros(1), torch.zeros(1), zeros, zeros, 1, 4, {})  # no-op
        with pytest.raises(StubKernelCalled):
            stand_in(torch.zeros(1), torch.zeros(1), one, zeros, 1, 4, {})
    assert memory_pool.copy_all_layer_kv_cache_func is original


# A fresh planner process as a user starts it on this GPU-less host: the CPU-engine switch set
# in the shell, no test double on the path, and `import sgl_kernel` failing as the real CUDA
# wheel's does here (TEST DOUBLE for that wheel: an import hook raising its ImportError).
WITHOUT_SGL_KERNEL = """
import importlib.abc, sys

class CudaWheelOnAGpuLessHost(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] == "sgl_kernel":
            raise ImportError("libcuda.so.1: cannot open shared object file: No such file")
        return None

sys.meta_path.insert(0, CudaWheelOnAGpuLessHost())
from sglang_specinit.planner.cli import main
sys.exit(main())
"""


@pytest.mark.slow
@needs_gpu_less_host
def test_the_command_line_plans_on_cpu_without_sgl_kernel(default_plan: dict) -> None:
    out = fresh_python(WITHOUT_SGL_KERNEL, "plan", "--json", SGLANG_USE_CPU_ENGINE="1")
    assert json.loads(out) == default_plan
