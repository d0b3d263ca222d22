"""Where the sglang 0.5.23 planner builds its pricing pools
(``sglang_0_5_23.pricing_host.pricing_device``) and what it then needs from ``sgl_kernel``
(``require_sgl_kernel``): on this GPU-less machine cpu, without the CPU engine and without any
``sgl_kernel`` (the pool's warm-up copy skipped: ``kv_warm_up_copy_skipped``), or, in a process
that imported SGLang as a CPU engine (this suite), with ``sgl_kernel``'s CPU op; on a CUDA host
that GPU with any ``sgl_kernel`` that imports (``test/gpu/test_gpu_planner_0523.py`` runs it
there). A CUDA host is stood in for by ``torch.cuda.is_available`` answering True (a TEST
DOUBLE: this machine has no GPU)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys

import pytest
import torch
from sglang_specinit.planner.cli import main
from sglang_specinit.planner.inputs import PlanError
from sglang_specinit.planner.shipped_examples import list_examples
from sglang_specinit.sglang_0_5_23 import planner_replay as release_0_5_23
from sglang_specinit.sglang_0_5_23 import pricing_host as pricing_host_0_5_23

pytestmark = pytest.mark.timeout(300)

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
        "cpu_engine": None,
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
    assert pricing_host_0_5_23.pricing_device() == "cpu"
    monkeypatch.delenv("SGLANG_USE_CPU_ENGINE")
    assert pricing_host_0_5_23.pricing_device() == "cuda"


@pytest.fixture
def stub_kernel() -> object:
    import sgl_kernel

    assert getattr(sgl_kernel, "IS_SPECINIT_TEST_DOUBLE", False)  # this suite's named double
    return sgl_kernel


@needs_gpu_less_host
def test_a_cpu_engine_without_the_cpu_op_exits_2_naming_the_cpu_engine_case(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stub_kernel: object
) -> None:
    monkeypatch.delattr(stub_kernel, "copy_all_layer_kv_cache_cpu")
    code = main(["plan", "--json"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "on cpu (torch sees no CUDA device)" in lines[0], lines[0]
    assert "runs sglang as a CPU engine (SGLANG_USE_CPU_ENGINE=1)" in lines[0], lines[0]
    assert "no CPU ops (copy_all_layer_kv_cache_cpu)" in lines[0], lines[0]
    assert "unset SGLANG_USE_CPU_ENGINE before sglang is imported" in lines[0], lines[0]


@needs_gpu_less_host
def test_cpu_without_the_cpu_engine_needs_no_sgl_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sgl_kernel", None)  # `import sgl_kernel` now fails
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.delenv("SGLANG_USE_CPU_ENGINE")
    pricing_host_0_5_23.require_sgl_kernel()
    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "1")
    with pytest.raises(PlanError, match="the sgl_kernel package is not installed"):
        pricing_host_0_5_23.require_sgl_kernel()


def _plan_json_here(*argv: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", "--json", *argv]) == 0
    return json.loads(out.getvalue())


@pytest.mark.parametrize("example", list_examples())
def test_skipping_the_warm_up_copy_changes_no_price(
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
    skipped = _plan_json_here("--example", example)
    copies_when_skipped = len(calls)
    monkeypatch.setattr(release_0_5_23, "kv_warm_up_copy_skipped", contextlib.nullcontext)
    copied = _plan_json_here("--example", example)
    assert copies_when_skipped == 0
    assert skipped == copied
    # Each MHA pool (a hybrid SWA pool's parts too) runs the copy; MLA pools have none.
    assert bool(calls) == (example not in MLA_EXAMPLES), len(calls)


# Examples whose pools have no warm-up copy: MLA, and DeepSeek-V4's own FP8 pools.
MLA_EXAMPLES = {"deepseek-v3-mtp", "deepseek-v4-flash-mtp"}


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
def test_the_command_line_plans_on_cpu_without_sgl_kernel() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_SGL_KERNEL, "plan", "--json"],
        env={**env, "SGLANG_USE_CPU_ENGINE": "1"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == _plan_json_here()


def test_cuda_host_needs_only_an_importable_sgl_kernel(
    monkeypatch: pytest.MonkeyPatch, stub_kernel: object
) -> None:
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
