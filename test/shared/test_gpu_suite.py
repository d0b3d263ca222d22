"""The GPU suite's verdicts fed by the installed release's own code, its servers' env and
``scripts/test-gpu.sh --dry-run``, without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from harness.gpu import broken_plugins, gpu_cases, gpu_release, gpu_verdict
from harness.gpu.broken_plugins import BATCH, launch_of
from harness.gpu.dry_run import gpu_env
from harness.launch import server_process
from harness.launch.engine import cpu_env
from harness.launch.sglang_release import SGL_KERNEL_STUB_DIR, extra_python_path
from harness.releases import installed_row

REPO = Path(__file__).resolve().parents[2]
ROW = installed_row()
if ROW is None or ROW.name not in gpu_release.MATRIX:
    pytest.skip("the GPU suite runs on 0.5.13.post1 and 0.5.23 only", allow_module_level=True)
RELEASE = gpu_release.settings(ROW.name)


# Per release: /server_info's nonzero graph memory by phase, the batch lists as the capture
# lines log them, the target's phase, the problems' heads when the plugin drops a batch size,
# whether stock fits (then the plugin serves more tokens; else stock's over-budget pool does),
# and whether the CPU harness puts the sgl_kernel stub on its servers' PYTHONPATH.
EXPECT = SimpleNamespace(
    **{
        "0.5.13.post1": dict(
            figures={"graph": 0.61},
            batch_lists=(),
            target_phase="graph",
            batch_list_problems=["cuda_graph_bs", "cuda_graph_max_bs"],
            stock_fits=False,  # 0.5.13.x stock lands its draft pool over the budget
            cpu_stub=False,
        ),
        # The merged payload's sum (0.71) is no runner's figure; per runner it matches.
        "0.5.23": dict(
            figures={"target_verify": 0.61, "draft_decode": 0.1},
            batch_lists=(("target verify", BATCH),),
            target_phase="target_verify",
            batch_list_problems=["cuda_graph_bs_decode", "captured batch lists differ"],
            stock_fits=True,  # stock fits this draft, with the duplicates resident
            cpu_stub=True,
        ),
    }[RELEASE.version]
)
# The cases whose checkpoints run remote code.
TRUSTED = ("multi_layer_mtp", "dflash")
DRAFT = gpu_verdict.expected_draft_graph(gpu_cases.case("eagle3", {}, RELEASE.version).args)


@pytest.fixture
def launch(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Any:
    return launch_of(RELEASE, monkeypatch, caplog)


def test_a_working_eagle3_launch_passes_every_gpu_verdict_and_each_broken_one_fails(
    launch: Any,
) -> None:
    capture, info = launch()
    assert capture.kinds == {"runner", "draft"}
    assert capture.runner_mem_gb == (pytest.approx(0.61, abs=0.005),)
    assert capture.batch_lists == EXPECT.batch_lists
    figures = {phase: gb for phase, gb in gpu_verdict.graph_figures_gb(info).items() if gb}
    assert figures == pytest.approx(EXPECT.figures)
    logged = {phase: sum(gbs) for phase, gbs in capture.gb_by_phase.items()}
    assert logged == pytest.approx(EXPECT.figures)  # each line under its /server_info phase
    assert DRAFT == "draft"
    # The plugin must capture every kind stock captures.
    assert gpu_verdict.same_graph_kinds(replace(capture, draft=0), capture) == [
        "stock captured ['draft'] graphs, the plugin-on server did not"
    ]
    (problem,) = gpu_verdict.graph_problems(*launch(draft=False), DRAFT)
    assert "draft's CUDA graphs were not captured" in problem
    # No graph at all (--disable-cuda-graph, or the plugin skipped the graph phase): 0 GB.
    nothing = gpu_verdict.GraphCapture.from_log("[2026-12-01 09:00:00] Load weight end.", RELEASE)
    _, no_graph = launch(draft=False, avail_gb=(8.0, 8.0))
    problems = gpu_verdict.graph_problems(nothing, no_graph, DRAFT)
    assert len(problems) == 3, problems  # no runner line, figure 0, no draft line
    # The log of one capture beside the /server_info of another (0.25 GB more).
    _, other = launch(avail_gb=(8.0, 7.14))
    (problem,) = gpu_verdict.graph_problems(capture, other, DRAFT)
    assert f"{EXPECT.target_phase}=0.86 GB matches no captured runner" in problem
    failed = gpu_verdict.GraphCapture.from_log("Capture cuda graph failed: boom", RELEASE)
    assert gpu_verdict.graph_problems(replace(capture, failed=failed.failed), info, DRAFT)
    # A CUDA-graph batch list that differs from stock's.
    plugin, plugin_info = launch(bs=BATCH[:-1])
    problems = gpu_verdict.batch_list_problems(plugin_info, info, plugin, capture)
    assert [p.split(":")[0] for p in problems] == EXPECT.batch_list_problems, problems
    # The whole case (the launch above as both sides): a working plugin passes every check
    # (graphs, same kinds, batch lists equal), each broken plugin fails its own.
    working = broken_plugins.working_case(launch, RELEASE)
    assert working.stock_fits is EXPECT.stock_fits
    assert gpu_verdict.case_problems(working) == {name: [] for name in gpu_verdict.CHECKS}
    ratio = working.plugin.info["max_total_num_tokens"] / working.stock.info["max_total_num_tokens"]
    assert (ratio > 1) is EXPECT.stock_fits, ratio
    assert broken_plugins.verdict_table(launch, RELEASE) == {
        name: [check for check in fails if check != "tokens" or EXPECT.stock_fits]
        for name, (_, fails) in broken_plugins.BROKEN.items()
    }


def test_no_cpu_double_reaches_a_gpu_server(tmp_path: Path) -> None:
    # The control: where the CPU harness's process env carries the stub (0.5.23), it is found.
    assert extra_python_path() == ([str(SGL_KERNEL_STUB_DIR)] if EXPECT.cpu_stub else [])
    cpu = server_process.sglang_process_env(plugin=True, base=os.environ)
    found = server_process.cpu_double_problems(cpu)
    assert any("sgl_kernel_stub" in p for p in found) is EXPECT.cpu_stub, found
    # A CPU Engine's env with the stub on its path: every double found, none left for a server.
    engine = cpu_env(plugin=True, base={"PYTHONPATH": str(SGL_KERNEL_STUB_DIR)})
    found = server_process.cpu_double_problems(engine)
    for double in ("SPECINIT_TEST_SHIMS", "SGLANG_USE_CPU_ENGINE", str(SGL_KERNEL_STUB_DIR)):
        assert any(double in p for p in found), (double, found)
    for plugin, base in ((True, os.environ), (False, os.environ), (True, engine)):
        env = gpu_env(plugin=plugin, report_dir=tmp_path, probe_dir=tmp_path, base=base)
        assert server_process.cpu_double_problems(env) == [], env["PYTHONPATH"]
        assert env["PYTHONPATH"].split(os.pathsep)[0] == str(server_process.SITE_DIR)
        assert str(SGL_KERNEL_STUB_DIR) not in env["PYTHONPATH"]


def test_dry_run_prints_every_server_parsed_by_the_installed_release(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "SPECINIT_GPU_OUT_DIR": str(tmp_path)}
    env["CUDA_DEVICE_ORDER"] = "FASTEST_FIRST"  # CUDA's default order, not NVML's
    command = ["bash", "scripts/test-gpu.sh", "--dry-run"]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    servers = [json.loads(line) for line in done.stdout.splitlines()]
    names = [c.name for c in gpu_cases.cases(release=RELEASE.version)]
    assert ("eagle3_post_capture" in names) is (RELEASE.version == "0.5.23")  # a 0.5.23 case
    at_f = {(s["case"], s["variant"]) for s in servers if s["when"] == "always"}
    assert {(n, v) for n in names for v in ("plugin", "stock")} <= at_f
    for server in servers:
        assert server["argv"][:3] == [sys.executable, "-m", "sglang.launch_server"], server
        if server["case"] != "eagle3_tp2":  # the suite's cases run deterministic (the default)
            assert server["argv"][-1] == "--enable-deterministic-inference", server
        env = server["env"]
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        dflash = server["case"] == "dflash"
        assert env.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN") == ("1" if dflash else None)
        assert ("--trust-remote-code" in server["argv"]) is (server["case"] in TRUSTED), server
        plugins = "specinit" if server["variant"] == "plugin" else "none-specinit-disabled"
        assert env["SGLANG_PLUGINS"] == plugins
        assert "PYTHONPATH" in env and "sgl_kernel_stub" not in env["PYTHONPATH"]
        if ROW.cpu_import_recipe:  # this process imports SGLang on cpu: removed, not inherited
            assert os.environ["SGLANG_USE_CPU_ENGINE"] == "1" and env["SGLANG_USE_CPU_ENGINE"] == ""
    post = [s for s in servers if s["case"] == "eagle3_post_capture"]
    assert all(s["env"]["SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"] == "1" for s in post)
    assert not (tmp_path / "cases").exists()  # nothing ran, nothing was written
