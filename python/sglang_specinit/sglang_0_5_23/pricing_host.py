"""Where the sglang 0.5.20 - 0.5.23 planner builds its pricing pools, and what that host needs.

The planner prices each pool by building it tiny with the release's own pool code
(:meth:`.planner_replay.Replay0523.pool_prices`). This module decides where (:func:`pricing_device`:
this host's GPU, else cpu), lets a GPU-less host build pools without any ``sgl_kernel``
(:func:`kv_warm_up_copy_skipped`, the pools' one kernel launch, a self-copy, skipped inside the
pricing call only) and checks, before SGLang's pool modules are imported, what ``sgl_kernel``
the chosen device needs (:func:`require_sgl_kernel`: one line saying what to change).
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
    """Where this process builds the tiny pools that price a 0.5.23 launch: ``cuda`` on a host
    whose torch sees a CUDA device, else ``cpu``.

    Why the host decides: a pool is built where torch can allocate, and on a CUDA host with the
    kernels a server uses. On a GPU-less host 0.5.23's pool modules, imported without
    ``SGLANG_USE_CPU_ENGINE`` (the command line's process drops it), import no ``sgl_kernel``
    op; the only kernel a pool runs while it is built, the warm-up KV copy, is skipped for the
    pricing call (:func:`kv_warm_up_copy_skipped`). Decided with torch only. A process that
    already imported SGLang as a CPU engine (the CPU tests) builds on cpu too, with the CPU ops
    it imported.
    """
    import os
    import sys

    if "sglang" in sys.modules and os.environ.get(CPU_ENGINE_ENV) == "1":
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@contextlib.contextmanager
def kv_warm_up_copy_skipped() -> Iterator[None]:
    """The KV pools built inside skip their warm-up copy, and only that (planner, cpu only).

    ``MHATokenToKVPool._init_kv_copy_and_warmup`` (``mem_cache/memory_pool.py``, sglang
    0.5.20-0.5.23) ends by calling ``copy_all_layer_kv_cache_func`` once with one location
    copied onto itself (slot 0 onto slot 0 of every layer): it compiles the Triton copy kernel
    for the server's first KV move, moves no byte and allocates nothing, so a pool's bytes are
    the same without it. On a GPU-less host that launch has no driver to run on. Inside this
    context the name the pool module calls answers such a self-copy by doing nothing and hands
    any other call to 0.5.23's function. Entered only around the planner's pricing call
    (:meth:`Replay0523.pool_prices`), never in a server process; the module's own function is
    back when the context ends.
    """
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
            return  # each location onto itself: nothing to move
        copy(data_ptrs, strides, tgt_loc, src_loc, num_locs, *args, **kwargs)

    with attribute_answering(memory_pool, "copy_all_layer_kv_cache_func", copy_unless_onto_itself):
        yield


def require_sgl_kernel() -> None:
    """What the planner's pricing pools need from ``sgl_kernel``, checked before SGLang's pool
    modules are imported, with one line saying what is missing and what to change:

    * on a CUDA host (:func:`pricing_device`), ``sgl_kernel`` itself (SGLang's CUDA kernels);
    * on cpu in a process that runs SGLang as a CPU engine (``SGLANG_USE_CPU_ENGINE=1``: an
      in-process caller; the command line drops it), the CPU KV-copy op its pool modules
      import (``kernels/ops/kvcache/cache_move.py``), which only ``sgl_kernel``'s CPU build has;
    * on cpu otherwise, nothing: the modules import no ``sgl_kernel`` op there, and the only
      kernel a pool runs while it is built is skipped (:func:`kv_warm_up_copy_skipped`).
    """
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
