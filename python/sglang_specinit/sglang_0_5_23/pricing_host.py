"""Where the 0.5.20 - 0.5.23 planner builds its pricing pools, and what that host needs.

Pools are built on this host's GPU, else on cpu, where the pools' one kernel launch (a warm-up
self-copy that moves no byte) is skipped inside the pricing call only.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from typing import Any

from sglang_specinit.planner.inputs import PlanError
from sglang_specinit.planner.replay import CPU_ENGINE_ENV, installed_release
from sglang_specinit.sglang_0_5_23.planned_device import attribute_answering


def pricing_device() -> str:
    """``cuda`` where torch sees a CUDA device (and SGLang is not a CPU engine), else ``cpu``."""
    import os
    import sys

    if "sglang" in sys.modules and os.environ.get(CPU_ENGINE_ENV) == "1":
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@contextlib.contextmanager
def kv_warm_up_copy_skipped() -> Iterator[None]:
    """Pools built inside skip their warm-up self-copy, and only that (planner on cpu only)."""
    import torch
    from sglang.srt.mem_cache import memory_pool

    copy = memory_pool.copy_all_layer_kv_cache_func

    def copy_unless_onto_itself(
        data_ptrs: torch.Tensor,
        strides: torch.Tensor,
        tgt_loc: torch.Tensor,
        src_loc: torch.Tensor,
        num_locs: int,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        if torch.equal(tgt_loc[:num_locs], src_loc[:num_locs]):
            return
        copy(data_ptrs, strides, tgt_loc, src_loc, num_locs, *args, **kwargs)

    with attribute_answering(memory_pool, "copy_all_layer_kv_cache_func", copy_unless_onto_itself):
        yield


def import_pool_code_here() -> None:
    """Import SGLang's KV pool module under this host's own facts: imported under the planned
    device or the CPU-engine switch, it asks for sgl_kernel ops that cpu pricing does without."""
    import sglang.srt.mem_cache.memory_pool  # noqa: F401


def require_sgl_kernel() -> None:
    """PlanError unless the pricing device's pool code can import what it needs from
    ``sgl_kernel`` (CUDA: the package; a CPU engine: its CPU ops; plain cpu: nothing)."""
    import os

    if pricing_device() == "cuda":
        try:
            import sgl_kernel  # noqa: F401
        except Exception as e:  # ImportError, or its CUDA library failing to load (OSError)
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise PlanError(
                f"the sglang {installed_release()} planner prices every KV pool by building it "
                "tiny on this host's GPU (torch sees CUDA) with sglang's own pool code, which "
                f"needs sgl_kernel (the sglang-kernel package), but it does not import: {why}"
            ) from None
        return
    if os.environ.get(CPU_ENGINE_ENV) != "1":
        return
    missing = None
    if importlib.util.find_spec("sgl_kernel") is None:
        missing = "the sgl_kernel package is not installed"
    else:
        import sgl_kernel

        if not hasattr(sgl_kernel, "copy_all_layer_kv_cache_cpu"):
            missing = "the installed sgl_kernel has no CPU ops (copy_all_layer_kv_cache_cpu)"
    if missing is not None:
        raise PlanError(
            f"the sglang {installed_release()} planner builds its pricing pools on cpu (torch "
            "sees no CUDA device), and this process runs sglang as a CPU engine "
            "(SGLANG_USE_CPU_ENGINE=1), whose pool code imports sgl_kernel's CPU ops, but "
            f"{missing}: unset "
            "SGLANG_USE_CPU_ENGINE before sglang is imported (the sglang-specinit command does; "
            "then no sgl_kernel is needed), or install sglang-kernel's CPU build"
        )
