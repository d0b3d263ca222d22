"""The GPU suite on the real 0.5.23 wheel, without a GPU: no CPU double in a GPU server's env,
and ``scripts/test-gpu.sh --dry-run`` (every server, parsed by 0.5.23's own parser)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.gpu import gpu_cases
from harness.gpu.server_env import gpu_env
from harness.launch import server_process
from harness.launch.sglang_release import SGL_KERNEL_STUB_DIR, extra_python_path

REPO = Path(__file__).resolve().parents[2]


def test_no_cpu_double_reaches_a_0_5_23_gpu_server(tmp_path: Path) -> None:
    # The control: on 0.5.23 the CPU harness's process env does carry the stub.
    assert extra_python_path() == [str(SGL_KERNEL_STUB_DIR)]
    cpu = server_process.sglang_process_env(plugin=True, base=os.environ)
    assert any("sgl_kernel_stub" in p for p in server_process.cpu_double_problems(cpu))
    assert os.environ.get("SGLANG_USE_CPU_ENGINE") == "1"
    for plugin in (True, False):
        env = gpu_env(plugin=plugin, report_dir=tmp_path, probe_dir=tmp_path)
        assert server_process.cpu_double_problems(env) == [], env["PYTHONPATH"]
        assert str(SGL_KERNEL_STUB_DIR) not in env["PYTHONPATH"]


def test_dry_run_prints_every_server_of_every_case_parsed_by_0_5_23(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", "scripts/test-gpu.sh", "--dry-run"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    servers = [json.loads(line) for line in done.stdout.splitlines()]
    names = [c.name for c in gpu_cases.cases(release="0.5.23")]
    assert "eagle3_post_capture" in names
    at_f = {(s["case"], s["variant"]) for s in servers if s["when"] == "always"}
    assert {(n, v) for n in names for v in ("plugin", "stock")} <= at_f
    for server in servers:
        assert server["argv"][:3] == [sys.executable, "-m", "sglang.launch_server"], server
        assert (
            "PYTHONPATH" in server["env"] and "sgl_kernel_stub" not in server["env"]["PYTHONPATH"]
        )
        assert server["env"]["SGLANG_USE_CPU_ENGINE"] == ""  # removed, not inherited
    post = [s for s in servers if s["case"] == "eagle3_post_capture"]
    assert all(s["env"]["SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"] == "1" for s in post)
