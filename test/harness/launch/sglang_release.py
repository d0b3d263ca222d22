"""Which sglang release this test process runs, and what a CPU run of it needs."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from harness.releases import installed_name

SGL_KERNEL_STUB_DIR = Path(__file__).resolve().parents[1] / "cpu_doubles" / "sgl_kernel_stub"


def release_tuple(text: str) -> tuple[int, int, int]:
    """``"0.5.13.post1"`` -> ``(0, 5, 13)``."""
    parts = [int("".join(c for c in p if c.isdigit()) or 0) for p in text.split(".")[:3]]
    return tuple((parts + [0, 0, 0])[:3])


@cache
def sglang_release() -> tuple[int, int, int]:
    """(major, minor, patch) of the installed sglang; (0, 0, 0) when absent."""
    return release_tuple(installed_name() or "0")


# 0.5.21 and 0.5.22 are 0.5.23's internal API generation: the 0.5.23 CPU recipe serves all three.
RUNTIME_CONTEXT_GENERATION = (0, 5, 21)


def runs_0_5_23() -> bool:
    """True on the 0.5.21-0.5.23 generation, which the 0.5.23 recipe runs."""
    return sglang_release() >= RUNTIME_CONTEXT_GENERATION


def graphs_off_kwargs(release: tuple[int, int, int] | None = None) -> dict[str, Any]:
    """ServerArgs kwargs that keep CUDA graphs off on ``release`` (default: installed), whose
    switches 0.5.14 (``cuda_graph_backend_prefill``) and 0.5.21 renamed."""
    release = release or sglang_release()
    if release >= RUNTIME_CONTEXT_GENERATION:
        return {"disable_decode_cuda_graph": True, "disable_prefill_cuda_graph": True}
    if release >= (0, 5, 14):
        return {"disable_cuda_graph": True, "cuda_graph_backend_prefill": "disabled"}
    return {"disable_cuda_graph": True, "disable_piecewise_cuda_graph": True}


def imports_sgl_kernel_cpu_ops() -> bool:
    """From 0.5.16 a CPU run imports its KV-move and speculative CPU ops from sgl_kernel."""
    return sglang_release() >= (0, 5, 16)


def extra_python_path() -> list[str]:
    """Directories a CPU SGLang process of this release needs on ``PYTHONPATH``."""
    return [str(SGL_KERNEL_STUB_DIR)] if imports_sgl_kernel_cpu_ops() else []
