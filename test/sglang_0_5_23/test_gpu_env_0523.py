"""The GPU suite on the real 0.5.23 wheel, without a GPU: no CPU double in a GPU server's env,
and ``scripts/test-gpu.sh --dry-run`` (every server, parsed by 0.5.23's own parser)."""

from __future__ import annotations

import os
from pathlib import Path

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
