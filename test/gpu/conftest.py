"""GPU runner suite: real servers, real CUDA memory, real speculative decoding.

Skipped without CUDA or without SGLang's CUDA kernels, each test with the reason; on a GPU
runner with the full sglang 0.5.13.post1 stack (sgl-kernel, flashinfer, torch 2.11) run
``bash scripts/test-gpu.sh``, which fails when nothing ran. Models come from the profile in
:mod:`harness.gpu_cases` (``SPECINIT_GPU_PROFILE``, per-case env overrides).

Between cases: this process becomes the subreaper of the servers' orphaned children (so a
scheduler whose launcher died is still reaped here), and before every case the suite waits
until each visible GPU's used memory is back within ``SPECINIT_GPU_MEMORY_TOLERANCE_MIB``
(default 1024) of what it was before the first server, for at most
``SPECINIT_GPU_MEMORY_WAIT_S`` (default 300) seconds.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# test/ holds the ``harness`` package; test/ itself is not a package.
_TEST_DIR = str(Path(__file__).resolve().parents[1])
if _TEST_DIR not in sys.path:
    sys.path.insert(0, _TEST_DIR)

from harness import device_memory, processes  # noqa: E402

MEMORY_TOLERANCE_BYTES = int(os.environ.get("SPECINIT_GPU_MEMORY_TOLERANCE_MIB", "1024")) << 20
MEMORY_WAIT_S = float(os.environ.get("SPECINIT_GPU_MEMORY_WAIT_S", "300"))


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
    ready, why = cuda_ready()
    if ready:
        return
    skip = pytest.mark.skip(reason=f"GPU suite: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def device_baselines() -> tuple[device_memory.DeviceMemoryReader, dict[int, int]]:
    """The memory reader and each visible GPU's used bytes before the first server."""
    processes.become_subreaper()
    reader = device_memory.default_reader()
    indices = device_memory.visible_device_indices(reader.device_count())
    return reader, device_memory.read_baselines(reader, indices)


@pytest.fixture
def wait_for_released_devices(
    device_baselines: tuple[device_memory.DeviceMemoryReader, dict[int, int]],
) -> Iterator[Callable[[], device_memory.MemoryWait]]:
    """Waits before the test (and whenever the test calls it, between two launches) until
    every GPU is back near its baseline; raises if one stays above it."""
    reader, baselines = device_baselines

    def wait() -> device_memory.MemoryWait:
        return device_memory.wait_until_released(
            reader, baselines, tolerance_bytes=MEMORY_TOLERANCE_BYTES, timeout_s=MEMORY_WAIT_S
        )

    wait()
    yield wait
