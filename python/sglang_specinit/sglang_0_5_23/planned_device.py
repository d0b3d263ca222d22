"""The planned device, as 0.5.20 - 0.5.23's server-args resolution sees it in the planner.

Inside :func:`planned_device` the resolution steps that ask about the machine get the planned
GPU's answers (platform facts, total memory, compute capability) instead of this host's.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from typing import Any

from sglang_specinit.planner.gpus import DeviceSpec

# override_platform's facts of a CUDA host (the compute capability comes from the preset).
_CUDA_HOST = {
    "is_cuda": True,
    "is_hip": False,
    "is_npu": False,
    "is_xpu": False,
    "is_musa": False,
    "is_mps": False,
    # Resolution reads `is_cpu() and has_amx`: no AMX path on a CUDA host.
    "has_amx": False,
}


def _capability_facts(sm: int) -> dict[str, Any]:
    return {
        "device_sm": sm,
        "device_capability": (sm // 10, sm % 10),
        "is_sm90": sm == 90,
        "is_hopper_with_cuda_12_3": sm == 90,
        "is_sm100": sm == 100,
        "is_sm110": sm == 110,
        "is_sm100_or_sm110": sm in (100, 110),
        "is_sm120": sm == 120,
        "is_blackwell": sm in (100, 110, 120),
    }


# Modules that bind get_device_memory_capacity by name at import.
CAPACITY_READERS = (
    "sglang.srt.arg_groups.memory_hook",
    "sglang.srt.arg_groups.kv_shard_hook",
    "sglang.srt.arg_groups.model_overrides.qwen3_vl",
)


@contextlib.contextmanager
def attribute_answering(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name`` is ``value`` inside the context and what it was again after it."""
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


def _device_capacity_answering(capacity_mib: float) -> contextlib.ExitStack:
    """Each capacity reader's ``get_device_memory_capacity`` answering ``capacity_mib``."""
    import importlib

    from sglang_specinit.sglang_0_5_23.release_shims import present_capacity_readers

    stack = contextlib.ExitStack()
    for name in present_capacity_readers(CAPACITY_READERS):  # per release: release_shims
        module = importlib.import_module(name)
        stack.enter_context(
            attribute_answering(
                module, "get_device_memory_capacity", lambda device=None: capacity_mib
            )
        )
    return stack


def _cuda_prefill_graph_default() -> contextlib.AbstractContextManager[None]:
    """``default_prefill_backend`` answering as on CUDA (it reads ``utils.is_cuda`` directly)."""
    import sglang.srt.utils as utils
    from sglang.srt.model_executor import cuda_graph_config

    original = cuda_graph_config.default_prefill_backend

    def on_cuda() -> str:
        with attribute_answering(utils, "is_cuda", lambda: True):
            return original()

    return attribute_answering(cuda_graph_config, "default_prefill_backend", on_cuda)


@contextlib.contextmanager
def planned_device(device_name: str, device: DeviceSpec) -> Iterator[None]:
    """Resolution seeing the planned device (``SGLANG_USE_CPU_ENGINE`` is read at import)."""
    from sglang.srt.runtime_context import override_platform

    from sglang_specinit.sglang_0_5_23.release_shims import known_platform_facts

    facts: dict[str, Any] = {}
    cuda: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    capability: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if device_name == "cuda":
        facts = dict(_CUDA_HOST, has_flashinfer=importlib.util.find_spec("flashinfer") is not None)
        if device.sm is not None:
            facts.update(_capability_facts(device.sm))
            capability = _cuda_capability_answering(device.sm)
        cuda = _cuda_prefill_graph_default()
    with (
        override_platform(**known_platform_facts(facts)),
        _device_capacity_answering(device.capacity_mib),
        cuda,
        capability,
    ):
        yield


def _cuda_capability_answering(sm: int) -> contextlib.AbstractContextManager[None]:
    """``torch.cuda.get_device_capability`` answering ``sm`` (DSA's defaults ask torch)."""
    import torch

    return attribute_answering(
        torch.cuda, "get_device_capability", lambda device=None: (sm // 10, sm % 10)
    )
