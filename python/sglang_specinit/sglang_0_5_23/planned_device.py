"""What sglang 0.5.20 - 0.5.23's server-args resolution sees in the planner: the planned device.

The planner resolves a launch for a device it does not run on (``--gpu H100-80GB`` on a
laptop). The resolution steps that ask about the machine get the planned device's answers inside
:func:`planned_device`, and only there: the platform facts (``runtime_context.override_platform``,
with only the facts the installed release knows: ``release_shims.known_platform_facts``), the
device's total memory (``get_device_memory_capacity``, bound by name in
:data:`CAPACITY_READERS`), the compute capability and the one CUDA default read from
``is_cuda()`` directly. Used by :mod:`.planner_replay` (resolution and pool layout).
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from typing import Any

from sglang_specinit.planner.gpus import DeviceSpec

# Platform facts (runtime_context.override_platform) of a CUDA host; the compute capability is
# the preset's when the device is one (gpus.GpuPreset.sm), else left to this host's probes.
_CUDA_HOST = {
    "is_cuda": True,
    "is_hip": False,
    "is_npu": False,
    "is_xpu": False,
    "is_musa": False,
    "is_mps": False,
    # The only resolution steps that read is_cpu() (model_overrides/gpt_oss.py) read it as
    # `is_cpu() and has_amx`: a CUDA host has no AMX path, whatever this process's
    # SGLANG_USE_CPU_ENGINE says.
    "has_amx": False,
}


def _capability_facts(sm: int) -> dict[str, Any]:
    """``override_platform`` facts for compute capability ``sm`` (90 = sm_90, Hopper)."""
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


# The modules whose resolution steps read the device's total memory; each binds
# ``utils.common.get_device_memory_capacity`` by name at import (test_planner_0523 checks the
# list against 0.5.23's sources).
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
    """Each capacity reader's ``get_device_memory_capacity`` answering ``capacity_mib``.

    The readers are imported first, so no module binds the stand-in during the context.
    """
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
    """``default_prefill_backend`` (``model_executor/cuda_graph_config.py``) answering as on a
    CUDA host: it reads ``sglang.srt.utils.is_cuda`` directly rather than ``get_platform()``,
    so its own body runs with that one name answering true for the duration of the call."""
    import sglang.srt.utils as utils
    from sglang.srt.model_executor import cuda_graph_config

    original = cuda_graph_config.default_prefill_backend

    def on_cuda() -> str:
        with attribute_answering(utils, "is_cuda", lambda: True):
            return original()

    return attribute_answering(cuda_graph_config, "default_prefill_backend", on_cuda)


@contextlib.contextmanager
def planned_device(device_name: str, device: DeviceSpec) -> Iterator[None]:
    """0.5.23's resolution seeing the planned device instead of this host.

    * ``get_device_memory_capacity`` (``utils/common.py``: ``nvidia-smi`` on CUDA) answers the
      device's total MiB in the steps that read it: the automatic fraction and the graph batch
      sizes key off it;
    * for ``--device cuda``, 0.5.23's own ``runtime_context.override_platform`` says the machine
      is a CUDA host (the preset's compute capability when known), and the one default that
      asks ``is_cuda()`` directly, the breakable prefill graph whose reserve the automatic
      fraction subtracts, is taken as on CUDA. ``SGLANG_USE_CPU_ENGINE`` is not flipped here
      (unlike the 0.5.13.x replay): 0.5.23 reads it at import time, and a module first imported
      inside the context would keep the flipped value; on a CUDA host it cannot matter anyway
      (``has_amx`` above).
    """
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
    """``torch.cuda.get_device_capability`` answering compute capability ``sm``.

    0.5.23's DeepSeek sparse-attention defaults (``arg_groups/model_hook.py``
    ``handle_model_specific_adjustments``: KV dtype, page size, attention backends) ask torch
    directly rather than ``get_platform()``; on a host without that GPU the call would raise.
    """
    import torch

    return attribute_answering(
        torch.cuda, "get_device_capability", lambda device=None: (sm // 10, sm % 10)
    )
