"""GPU runner suite: real servers, real CUDA memory, real speculative decoding."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from harness.gpu import device_memory, gpu_summary, time_budget

# Before anything imports torch: CUDA's numbering must be NVML's (see harness.gpu.device_memory).
os.environ[device_memory.CUDA_DEVICE_ORDER[0]] = device_memory.CUDA_DEVICE_ORDER[1]
MEMORY_TOLERANCE_BYTES = int(os.environ.get("SPECINIT_GPU_MEMORY_TOLERANCE_MIB", "1024")) << 20


def cuda_ready() -> tuple[bool, str]:
    """Whether this Python can run SGLang on CUDA, and why not."""
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    if importlib.util.find_spec("sgl_kernel") is None:
        return False, "sgl_kernel (SGLang's CUDA kernels) is not installed"
    return True, ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        # Each test's limit from its launches (harness.gpu.time_budget), as the workflow sums it.
        name = getattr(item, "originalname", item.name)
        if name in time_budget.LAUNCHES:
            item.add_marker(pytest.mark.timeout(time_budget.limit_s_of(name)))
    ready, why = cuda_ready()
    if ready:
        return
    skip = pytest.mark.skip(reason=f"GPU suite: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def device_baselines() -> tuple[device_memory.NvmlMemoryReader, dict[int, int]]:
    """The memory reader and each GPU's used bytes before the first server."""
    reader = device_memory.NvmlMemoryReader()
    return reader, {i: reader.used_bytes(i) for i in range(reader.device_count())}


@pytest.fixture
def wait_for_released_devices(
    device_baselines: tuple[device_memory.NvmlMemoryReader, dict[int, int]],
) -> Callable[[int], dict[int, int]]:
    """``wait(tp)``: wait until the launch's ``tp`` GPUs are back near their baselines."""
    reader, baselines = device_baselines

    def wait(tp: int) -> dict[int, int]:
        indices = device_memory.devices_for_case(tp, reader.device_count(), reader.uuids())
        return device_memory.wait_until_released(
            reader,
            {i: baselines[i] for i in indices if i in baselines},
            tolerance_bytes=MEMORY_TOLERANCE_BYTES,
            timeout_s=time_budget.device_wait_s(None),
        )

    return wait


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each test's outcome as soon as it is known (harness.gpu.gpu_summary.record)."""
    directory = os.environ.get("SPECINIT_GPU_OUT_DIR", "").strip()
    if not directory:
        return
    final = report.when == "call" or (report.when == "setup" and not report.passed)
    final = final or (report.when == "teardown" and report.failed)
    if not final:
        return
    outcome = "error" if report.failed and report.when != "call" else report.outcome
    detail = ""
    if report.skipped and isinstance(report.longrepr, tuple):
        detail = str(report.longrepr[2]).removeprefix("Skipped: ")
    elif report.failed:
        detail = ((report.longreprtext or "").strip().splitlines() or [""])[-1]
    gpu_summary.record(Path(directory), report.nodeid, outcome, detail, report.duration)
