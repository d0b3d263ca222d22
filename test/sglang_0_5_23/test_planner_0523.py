"""``sglang-specinit plan`` and ``report`` in the sglang 0.5.23 environment, with 0.5.23's own
server-args logic (``sglang_0_5_23/planner_replay.py``): every shipped example, ``--json``, the
report, bad input, and every pool priced by the function the 0.5.23 server runs
(``runtime_budget.price_configurators``) with the stock column from 0.5.23's own configurator.
No SGLang launch: the plans run in this process (this suite's conftest sets
``SGLANG_USE_CPU_ENGINE=1`` before SGLang is imported and puts the ``sgl_kernel`` test double on
the path: the planner builds its pricing pools on cpu with 0.5.23's pool code), plus two fresh
planner processes started up front: this environment's console entry (no double on its path:
it drops the CPU-engine switch and needs no ``sgl_kernel``), and ``.venv``'s planner (sglang
0.5.13.post1) printing the 0.5.23 rule, for the cross-release checks."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints.published_configs import EXAMPLES, dsa_config_dir
from harness.reports.report_reading import BREAKDOWN_KEYS
from sglang_specinit.planner.cli import main
from sglang_specinit.planner.shipped_examples import EXAMPLES_DIR, list_examples

pytestmark = pytest.mark.timeout(300)

MIB = 1 << 20
GIB = 1 << 30
SUBPROCESS_TIMEOUT_S = 240


def main_venv_python() -> Path:
    """``.venv``'s interpreter, found through the .pth that layers this venv over it."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    main_site = Path((purelib / "zz-specinit-main-venv.pth").read_text().strip())
    return main_site.parents[2] / "bin" / "python"


@pytest.fixture(scope="module")
def fresh_processes() -> Iterator[dict[str, subprocess.Popen[str]]]:
    """Both fresh planner processes, started together (each spends its time importing SGLang)."""
    argv = ["-m", "sglang_specinit.planner.cli", "plan", "--json"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    procs = {
        # This environment's entry point, in a shell with the CPU-engine switch set, without
        # the sgl_kernel test double (the planner drops the switch; its cpu pools need none).
        "0.5.23": subprocess.Popen(
            [sys.executable, *argv],
            env={**env, "SGLANG_USE_CPU_ENGINE": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ),
        # The 0.5.13.post1 environment's planner (that release's own code).
        "0.5.13.post1": subprocess.Popen(
            [str(main_venv_python()), *argv],
            env={k: v for k, v in env.items() if k != "SGLANG_USE_CPU_ENGINE"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ),
    }
    yield procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def fresh_plan(procs: dict[str, subprocess.Popen[str]], which: str) -> dict:
    out, err = procs[which].communicate(timeout=SUBPROCESS_TIMEOUT_S)
    assert procs[which].returncode == 0, err[-3000:]
    return json.loads(out)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run(capsys, "plan", "--json", *argv)
    assert code == 0, err
    return json.loads(out)


def key_tree(value: object) -> object:
    """The nested key structure of a JSON value (values dropped)."""
    if isinstance(value, dict):
        return {k: key_tree(v) for k, v in value.items()}
    return None


@pytest.fixture(scope="module", autouse=True)
def _started(fresh_processes: dict) -> None:
    """Start the fresh processes before the in-process plans take the cores."""


# Every shipped example


@pytest.mark.parametrize("example", list_examples())
def test_every_example_plans_with_0_5_23s_rule(
    capsys: pytest.CaptureFixture[str], example: str
) -> None:
    data = plan_json(capsys, "--example", example)
    assert data["sglang_version"] == "0.5.23"
    assert data["stock"]["release"] == "0.5.23"
    assert not [k for k in data if k.startswith(("stock_", "upstream_"))]
    for section in (data, data["stock"]):
        assert set(BREAKDOWN_KEYS) <= set(section)
        assert section["tokens"] > 0 and section["tokens"] % section["page_size"] == 0
    # Both columns run on the same fraction (0.5.23 has no flat speculative reserve) ...
    assert data["mem_fraction_static"] == data["stock"]["mem_fraction_static"]
    # ... and this package's plan fits its budget.
    assert data["used_bytes"] <= data["budget_bytes"]


def test_v4_example_plans_as_the_layout_matrix_sizes_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from harness.matrices.dsv4_flash import CELLS
    from test_dsv4_never_worse_than_stock import evaluate

    data = plan_json(capsys, "--example", "deepseek-v4-flash-mtp")
    stock = data["stock"]
    cell = dataclasses.replace(
        next(c for c in CELLS if c.name == "V4-Flash MTP, H200 FP4, TP 4"),
        mem_fraction_static=data["mem_fraction_static"],
    )
    # The duplicates stock holds while it profiles: the NextN draft's own embed and lm_head
    # (bf16, vocabulary-sharded), the matrix's figure; the plan's at-profile bytes show them.
    duplicates = cell.weights()[2]
    at_profile = {
        k: round(d["min_viable_mem_fraction_static"] * data["pre_load_free_bytes"])
        for k, d in (("ours", data), ("stock", stock))
    }
    assert (
        abs(at_profile["stock"] - at_profile["ours"] - duplicates)
        < 1e-6 * (data["pre_load_free_bytes"])
    )
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


def test_default_example_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan")
    assert code == 0, err
    for text in ("stock 0.5.23", "sglang-specinit", "sglang 0.5.23", "llama31-8b-eagle3"):
        assert text in out
    assert "0.5.13" not in out and "0.5.14" not in out


def test_automatic_fraction_is_0_5_23s_heuristic_on_the_planned_gpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = plan_json(capsys, "--example", "llama31-8b-eagle3")
    assert data["mem_fraction_static"] == 0.83
    assert data["pre_load_free_bytes"] == 81559 * MIB - GIB
    # DeepSeek-V3 MTP, H200 (143771 MiB), TP 8: 512 + 12288 + 8 / 8 * 1024 + 512 * 2 + 1536
    # (MLA prefill graph) = 16384; round(127387 / 143771, 3) = 0.886.
    assert plan_json(capsys, "--example", "deepseek-v3-mtp")["mem_fraction_static"] == 0.886


def test_the_cpu_engine_switch_does_not_move_a_gpu_plan(
    capsys: pytest.CaptureFixture[str], fresh_processes: dict
) -> None:
    assert os.environ.get("SGLANG_USE_CPU_ENGINE") == "1"
    here = plan_json(capsys)
    fresh = fresh_plan(fresh_processes, "0.5.23")
    assert fresh == here
    assert here["mem_fraction_static"] == 0.83
    assert os.environ.get("SGLANG_USE_CPU_ENGINE") == "1"  # this process's own is untouched


def test_same_json_and_geometry_as_the_0_5_13_environment(
    capsys: pytest.CaptureFixture[str], fresh_processes: dict
) -> None:
    here = plan_json(capsys)
    there = fresh_plan(fresh_processes, "0.5.13.post1")
    # 0.5.13.post1's column adds its automatic fraction's speculative reserve.
    stock_here, stock_there = here.pop("stock"), there.pop("stock")
    assert (stock_here["release"], stock_there["release"]) == ("0.5.23", "0.5.13.post1")
    reserve = {"spec_reserve_bytes", "spec_reserve_balance_bytes"}
    assert set(stock_there) - set(stock_here) == reserve and set(stock_here) < set(stock_there)
    assert key_tree(there) == key_tree(here)
    for key in (
        "target_weight_bytes",
        "draft_weight_bytes",
        "target_kv_bytes_per_token",
        "draft_kv_bytes_per_token",
        "speculative_algorithm",
        "max_running_requests",
        "page_size",
    ):
        assert there[key] == here[key], key


def test_flags_only_0_5_23_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    new = plan_json(capsys, "--example", "llama31-70b-eagle-tp4", "--attn-dp-size", "2")
    old = plan_json(
        capsys, "--example", "llama31-70b-eagle-tp4", "--dp-size", "2", "--enable-dp-attention"
    )
    assert new == old
    assert new["max_running_requests"] == 24  # 48 split over two attention-DP groups
    base = plan_json(capsys)
    fp8 = plan_json(capsys, "--speculative-draft-kv-cache-dtype", "fp8_e4m3")
    assert fp8["draft_kv_bytes_per_token"] * 2 == base["draft_kv_bytes_per_token"]
    assert fp8["target_kv_bytes_per_token"] == base["target_kv_bytes_per_token"]


def test_capacity_readers_are_every_resolution_module_that_reads_it() -> None:
    import sglang.srt.arg_groups as arg_groups
    from sglang_specinit.sglang_0_5_23.planned_device import CAPACITY_READERS

    root = Path(arg_groups.__file__).parent
    readers = {
        "sglang.srt.arg_groups." + ".".join(path.relative_to(root).with_suffix("").parts)
        for path in root.rglob("*.py")
        if "get_device_memory_capacity" in path.read_text()
    }
    assert readers == set(CAPACITY_READERS)


# Every pool priced as the 0.5.23 server prices it


def _dsa_dir(tmp_path: Path) -> Path:
    """DeepSeek-V3.2's config (DSA indexer) with DeepSeek-V3's checkpoint sizes."""
    (tmp_path / "dsa").mkdir(exist_ok=True)
    directory = dsa_config_dir(tmp_path / "dsa")
    shutil.copy(EXAMPLES / "deepseek-v3-mtp" / "target" / "weights-size.json", directory)
    return directory


def _nnpl0_draft(tmp_path: Path) -> Path:
    """The EAGLE3 example's draft with ``num_nextn_predict_layers: 0`` (stock reserves none)."""
    draft = tmp_path / "eagle3-nnpl0"
    shutil.copytree(EXAMPLES / "llama31-8b-eagle3" / "draft", draft, dirs_exist_ok=True)
    config = json.loads((draft / "config.json").read_text())
    config["num_nextn_predict_layers"] = 0
    (draft / "config.json").write_text(json.dumps(config))
    return draft


DEEPSEEK_MTP = {
    "speculative_algorithm": "NEXTN",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
    "tp_size": 8,
    "page_size": 64,
}
# name -> (plan flags, the same launch as ServerArgs keyword arguments); H200 (sm_90) presets.
PRICED_LAYOUTS: dict[str, Any] = {
    "DeepSeek-V3.2 DSA fp8_e4m3, TP 8": lambda tmp: (
        ["--example", "deepseek-v3-mtp", "--model-path", str(_dsa_dir(tmp))]
        + ["--kv-cache-dtype", "fp8_e4m3"],
        {**DEEPSEEK_MTP, "model_path": str(_dsa_dir(tmp)), "kv_cache_dtype": "fp8_e4m3"},
    ),
    "DeepSeek-V3.2 DSA bf16, TP 8": lambda tmp: (
        ["--example", "deepseek-v3-mtp", "--model-path", str(_dsa_dir(tmp))]
        + ["--kv-cache-dtype", "bfloat16"],
        {**DEEPSEEK_MTP, "model_path": str(_dsa_dir(tmp)), "kv_cache_dtype": "bfloat16"},
    ),
    "DeepSeek-V3 dense MLA, TP 8 DCP 8": lambda tmp: (
        ["--example", "deepseek-v3-mtp", "--dcp-size", "8"],
        {
            **DEEPSEEK_MTP,
            "model_path": str(EXAMPLES / "deepseek-v3-mtp" / "target"),
            "dcp_size": 8,
        },
    ),
    "llama31-8b + EAGLE3, num_nextn_predict_layers 0": lambda tmp: (
        ["--example", "llama31-8b-eagle3"]
        + ["--speculative-draft-model-path", str(_nnpl0_draft(tmp))],
        {
            "model_path": str(EXAMPLES / "llama31-8b-eagle3" / "target"),
            "speculative_draft_model_path": str(_nnpl0_draft(tmp)),
            "speculative_algorithm": "EAGLE3",
            "speculative_num_steps": 3,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4,
        },
    ),
}


def _servers_prices(kwargs: dict[str, Any]) -> tuple[Any, Any, tuple[Any, ...], int]:
    """(target configurator, the target's price, the drafts' prices, page size): the layout
    built as the layout matrix builds it (ServerArgs from keyword arguments, device cpu, the
    H200's compute capability as a test double), priced by the server's function."""
    from unittest import mock

    from sglang_specinit.sglang_0_5_23.offline_configurator import published_layout
    from sglang_specinit.sglang_0_5_23.runtime_budget import price_configurators

    with mock.patch("torch.cuda.get_device_capability", return_value=(9, 0)):
        layout = published_layout(**kwargs)
    target, drafts, fixed = price_configurators(layout.target, layout.drafts, [])
    assert fixed == 0
    return layout.target, target, drafts, int(layout.target.page_size)


@dataclass(frozen=True)
class PricedLayout:
    planned: dict  # plan --json
    target: Any  # the server's price of the target pool
    drafts: tuple[Any, ...]  # ... and of each draft runner's
    page_size: int
    stock_cell: float  # 0.5.23's own configurator: create_memory_pool_configurator(kvc)


@pytest.fixture(scope="module")
def priced_layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, PricedLayout]:
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    results = {}
    for i, (name, build) in enumerate(PRICED_LAYOUTS.items()):
        flags, kwargs = build(tmp_path_factory.mktemp(f"layout{i}"))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["plan", "--json", *flags]) == 0
        kvc, target, drafts, page = _servers_prices(kwargs)
        results[name] = PricedLayout(
            json.loads(out.getvalue()),
            target,
            drafts,
            page,
            float(create_memory_pool_configurator(kvc)._cell_size),
        )
    return results


@pytest.mark.parametrize("name", list(PRICED_LAYOUTS))
def test_plan_prices_every_pool_with_the_servers_function(
    priced_layouts: dict[str, PricedLayout], name: str
) -> None:
    from sglang_specinit.budget import kv_pool_bytes

    r = priced_layouts[name]
    data, tokens = r.planned, r.planned["tokens"]
    assert data["page_size"] == r.page_size
    assert data["target_kv_bytes_per_token"] == int(r.target.bytes_per_token())
    assert data["draft_kv_bytes_per_token"] == int(sum(d.bytes_per_token() for d in r.drafts))
    assert data["target_kv_pool_bytes"] == kv_pool_bytes(r.target, tokens, r.page_size)
    assert data["draft_kv_pool_bytes"] == sum(
        kv_pool_bytes(d, tokens, r.page_size) for d in r.drafts
    )
    stock = data["stock"]
    assert stock["priced_kv_bytes_per_token"] == int(r.stock_cell)
    assert stock["target_kv_pool_bytes"] == kv_pool_bytes(r.target, stock["tokens"], r.page_size)
    assert data["used_bytes"] <= data["budget_bytes"]


def test_dsa_fp8_is_planned_at_0_5_23s_width(priced_layouts: dict[str, PricedLayout]) -> None:
    fp8, bf16 = (
        priced_layouts[f"DeepSeek-V3.2 DSA {dtype}, TP 8"].planned for dtype in ("fp8_e4m3", "bf16")
    )
    rows = [d["target_kv_bytes_per_token"] + d["draft_kv_bytes_per_token"] for d in (fp8, bf16)]
    layers = 61 + 1  # DeepSeek-V3.2's layers and its MTP layer
    assert rows[1] - rows[0] == layers * (1_152 - 656)
    assert rows[0] == fp8["stock"]["priced_kv_bytes_per_token"]


def test_dense_mla_dcp_draft_is_planned_replicated(
    priced_layouts: dict[str, PricedLayout],
) -> None:
    data = priced_layouts["DeepSeek-V3 dense MLA, TP 8 DCP 8"].planned
    stock = data["stock"]
    assert data["draft_kv_bytes_per_token"] == 8 * 1_152
    assert stock["priced_kv_bytes_per_token"] - data["target_kv_bytes_per_token"] == 1_152
    assert stock["used_bytes"] > stock["budget_bytes"] >= data["used_bytes"]


def test_nnpl0_draft_is_planned_although_stock_reserves_none(
    priced_layouts: dict[str, PricedLayout],
) -> None:
    data = priced_layouts["llama31-8b + EAGLE3, num_nextn_predict_layers 0"].planned
    stock = data["stock"]
    assert stock["priced_kv_bytes_per_token"] == data["target_kv_bytes_per_token"]
    assert data["draft_kv_bytes_per_token"] > 0
    assert stock["used_bytes"] > stock["budget_bytes"] >= data["used_bytes"]


# The report


def test_report_covers_every_example_with_0_5_23s_rule(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "report"
    code, stdout, err = run(capsys, "report", "--out", str(out))
    assert code == 0, err
    assert "Traceback" not in err
    data = json.loads((out / "report.json").read_text())
    assert sorted(data) == list_examples()
    for case in data.values():
        assert [v["key"] for v in case["variants"]] == ["stock", "specinit"]
    assert "stock 0.5.23" in (out / "README.md").read_text()


# Bad input: exit 2, one line on stderr, no traceback


def _write_config(directory: Path, config: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@pytest.fixture()
def bad_inputs(tmp_path: Path) -> dict[str, list[str]]:
    no_arch = _write_config(tmp_path / "no-arch", {"model_type": "llama", "hidden_size": 64})
    dsv4 = EXAMPLES_DIR / "deepseek-v4-flash-mtp" / "target"
    llama = str(EXAMPLES_DIR / "llama31-8b-eagle3" / "target")
    return {
        "missing path": ["plan", "--model-path", str(tmp_path / "nope")],
        "missing draft path": [
            "plan",
            "--example",
            "llama31-8b-eagle3",
            "--speculative-draft-model-path",
            str(tmp_path / "x"),
        ],
        "no architectures": ["plan", "--model-path", str(no_arch)],
        "fraction zero": ["plan", "--mem-fraction-static", "0"],
        "fraction above one": ["plan", "--mem-fraction-static", "1.5"],
        "unknown gpu": ["plan", "--gpu", "H300"],
        "bad size": ["plan", "--device-memory", "lots"],
        "DeepSeek-V4 without a draft": [
            "plan",
            "--model-path",
            str(dsv4),
            "--trust-remote-code",
            "--tp",
            "4",
        ],
        "dflash without draft": [
            "plan",
            "--model-path",
            llama,
            "--speculative-algorithm",
            "DFLASH",
        ],
        "pipeline parallel with EAGLE3": ["plan", "--pp-size", "2"],
        "0.5.13 rule here": ["plan", "--sglang-version", "0.5.13.post1"],
        "unknown example": ["plan", "--example", "nope"],
        # Every CUDA rank's Llama asserts the head split (32 heads, 8 KV heads).
        "tp that does not split the heads": ["plan", "--tp", "3"],
        # The 8B pair's weights exceed an automatic budget of 16 GiB.
        "weights that do not fit": ["plan", "--device-memory", "16GiB"],
        "0.5.13-only flag": ["plan", "--disable-piecewise-cuda-graph"],
        "report of an unknown example": ["report", "--out", str(tmp_path / "r"), "--example", "x"],
        "report of a missing file": [
            "report",
            "--out",
            str(tmp_path / "r"),
            "--from-json",
            str(tmp_path / "none.json"),
        ],
    }


EXPECTED_MESSAGES = {
    "missing path": "is not a local directory",
    "missing draft path": "--speculative-draft-model-path",
    "no architectures": "no 'architectures'",
    "fraction zero": "--mem-fraction-static 0.0 is outside (0, 1)",
    "fraction above one": "is outside (0, 1)",
    "unknown gpu": "H100-80GB, H100-94GB, H200-141GB, A100-80GB, A100-40GB, L40S, RTX-4090, B200",
    "bad size": "cannot read a size",
    "DeepSeek-V4 without a draft": "DeepSeek-V4 without a speculative draft",
    # 0.5.23's own refusals, in its own words.
    "dflash without draft": "requires setting --speculative-draft-model-path",
    "pipeline parallel with EAGLE3": "Pipeline parallelism currently only supports EAGLE",
    "0.5.13 rule here": "plan in sglang 0.5.13.post1's environment",
    "unknown example": "shipped examples",
    "tp that does not split the heads": "pass a --tp-size that does: 1, 2, 4, 8, 16, 32",
    "weights that do not fit": "leave no room for the KV cache",
    "0.5.13-only flag": "unrecognized arguments: --disable-piecewise-cuda-graph",
    "report of an unknown example": "shipped examples",
    "report of a missing file": "none.json",
}


@pytest.mark.parametrize("case", sorted(EXPECTED_MESSAGES))
def test_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], bad_inputs: dict[str, list[str]], case: str
) -> None:
    code, out, err = run(capsys, *bad_inputs[case])
    assert code == 2, (out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert EXPECTED_MESSAGES[case] in lines[0], lines[0]


@pytest.mark.parametrize("pp_spec", [True, False], ids=["pp-spec", "pd-prefill-only"])
def test_pipeline_parallel_eagle_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, pp_spec: bool
) -> None:
    if pp_spec:
        monkeypatch.setenv("SGLANG_ENABLE_PP_SPEC", "1")
    else:
        monkeypatch.delenv("SGLANG_ENABLE_PP_SPEC", raising=False)
    code, out, err = run(capsys, "plan", "--example", "llama31-70b-eagle-tp4", "--pp-size", "2")
    assert code == 2, (out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    expected = (
        "the planner plans one rank and PP stages differ"
        if pp_spec
        else "PP + speculative decoding (MTP) is only supported on prefill nodes"
    )
    assert expected in lines[0], lines[0]


def test_a_fraction_the_weights_do_not_fit_is_refused_as_the_server_refuses_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "plan", "--mem-fraction-static", "0.1")
    assert code == 2 and out == "", out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "leave no room for the KV cache under --mem-fraction-static=0.1" in lines[0]
    suggested = float(lines[0].split("Pass --mem-fraction-static ")[1].split()[0])
    assert plan_json(capsys, "--mem-fraction-static", str(suggested))["tokens"] > 0
