"""Where the sglang 0.5.23 planner builds its pricing pools
(``planner.release_0_5_23.pricing_device``) and what it then needs from ``sgl_kernel``
(``require_sgl_kernel``): on this GPU-less machine cpu, as a CPU engine with ``sgl_kernel``'s
CPU op; on a CUDA host that GPU with any ``sgl_kernel`` that imports
(``test/gpu/test_gpu_planner_0523.py`` runs it there). A CUDA host is stood in for by
``torch.cuda.is_available`` answering True (a TEST DOUBLE: this machine has no GPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from sglang_specinit.planner import release_0_5_23
from sglang_specinit.planner.cli import main
from sglang_specinit.planner.plan import PlanError

pytestmark = pytest.mark.timeout(300)

# A fresh planner process, before SGLang is imported: the host decision and the CLI's switch.
FRESH_DECISION = """
import json, os, sys
import torch
from sglang_specinit.planner import cli
from sglang_specinit.planner.release_0_5_23 import pricing_device

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
    """No CUDA device: cpu, and the command line imports SGLang as a CPU engine; with CUDA
    the same process would build on the GPU and drop the switch. Decided without SGLang."""
    env = {k: v for k, v in os.environ.items() if k not in ("SGLANG_USE_CPU_ENGINE", "PYTHONPATH")}
    proc = subprocess.run(
        [sys.executable, "-c", FRESH_DECISION],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == {
        "device": "cpu",
        "cpu_engine": "1",
        "device_on_cuda_host": "cuda",
        "cpu_engine_on_cuda_host": None,
        "sglang_imported": False,
    }


def test_a_process_that_imported_sglang_as_a_cpu_engine_keeps_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its pool modules took CPU kernels at import, so even with CUDA it prices on cpu."""
    import sglang.srt.server_args  # noqa: F401  (this suite imports SGLang as a CPU engine)

    assert os.environ.get("SGLANG_USE_CPU_ENGINE") == "1"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # TEST DOUBLE: CUDA host
    assert release_0_5_23.pricing_device() == "cpu"
    monkeypatch.delenv("SGLANG_USE_CPU_ENGINE")
    assert release_0_5_23.pricing_device() == "cuda"


@pytest.fixture
def stub_kernel() -> object:
    import sgl_kernel

    assert getattr(sgl_kernel, "IS_SPECINIT_TEST_DOUBLE", False)  # this suite's named double
    return sgl_kernel


@needs_gpu_less_host
def test_cpu_host_without_the_cpu_op_exits_2_naming_the_cpu_case(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stub_kernel: object
) -> None:
    monkeypatch.delattr(stub_kernel, "copy_all_layer_kv_cache_cpu")
    code = main(["plan", "--json"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "on cpu (torch sees no CUDA device)" in lines[0], lines[0]
    assert "no CPU ops (copy_all_layer_kv_cache_cpu)" in lines[0], lines[0]


def test_cuda_host_needs_only_an_importable_sgl_kernel(
    monkeypatch: pytest.MonkeyPatch, stub_kernel: object
) -> None:
    """On a CUDA host (TEST DOUBLE: ``pricing_device`` answering cuda) the CUDA build, which has
    no CPU op, is enough; no sgl_kernel at all is refused naming the GPU case."""
    monkeypatch.setattr(release_0_5_23, "pricing_device", lambda: "cuda")
    monkeypatch.delattr(stub_kernel, "copy_all_layer_kv_cache_cpu")
    release_0_5_23.require_sgl_kernel()
    monkeypatch.setitem(sys.modules, "sgl_kernel", None)  # `import sgl_kernel` now fails
    with pytest.raises(PlanError) as refused:
        release_0_5_23.require_sgl_kernel()
    message = str(refused.value)
    assert "on this host's GPU (torch sees CUDA)" in message, message
    assert "sgl_kernel (the sglang-kernel package), but it does not import" in message, message
    assert "\n" not in message
