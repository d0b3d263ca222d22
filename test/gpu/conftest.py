"""GPU runner suite: real servers, real CUDA memory, real speculative decoding.

Skipped cleanly without CUDA or without SGLang's CUDA kernels. On a GPU runner with the full
sglang 0.5.13.post1 stack (sgl-kernel, flashinfer, torch 2.11) run ``bash scripts/test-gpu.sh``.
Models come from env vars with public defaults (see ``CASES`` in test_gpu_servers.py).
"""

from __future__ import annotations

import importlib.util

import pytest


def cuda_ready() -> tuple[bool, str]:
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
