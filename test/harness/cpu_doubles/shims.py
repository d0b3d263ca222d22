"""CPU-only test doubles that let SGLang 0.5.13.post1's speculative init path run without a GPU."""

from __future__ import annotations

import gc
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

SHIMS_ENV = "SPECINIT_TEST_SHIMS"
CAPACITY_ENV = "SPECINIT_TEST_DEVICE_CAPACITY_BYTES"
# Comma-separated capacities indexed by gpu id; gpu ids without an entry use CAPACITY_ENV.
PER_DEVICE_CAPACITY_ENV = "SPECINIT_TEST_DEVICE_CAPACITIES_BYTES"
NATIVE_MOVE_KV_ENV = "SGLANG_NATIVE_MOVE_KV_CACHE"
DEFAULT_CAPACITY_BYTES = 256 << 20
_MAX_READINGS = 2000


def noop_kv_copy_and_warmup(self: Any) -> None:
    """REPLACE for ``MHATokenToKVPool._init_kv_copy_and_warmup``: skip the Triton warm-up."""
    self._kv_copy_config = None


def cuda_synchronize_without_device(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """AROUND for ``torch.cuda.synchronize``: a no-op when no CUDA device exists."""
    import torch

    return original(*args, **kwargs) if torch.cuda.is_available() else None


@dataclass(frozen=True)
class MeterReading:
    """One call of the simulated ``get_available_gpu_memory`` (who asked, and what it saw)."""

    seq: int
    caller: str
    is_draft_worker: bool | None
    used_bytes: int
    free_bytes: int


def storage_bytes(tensors: Any, device: str | None = None) -> int:
    """Bytes of the distinct storages behind ``tensors`` (on ``device``), each counted once."""
    storages: dict[int, int] = {}
    for tensor in tensors:
        try:
            if device is not None and tensor.device.type != device:
                continue
            storage = tensor.untyped_storage()
            ptr = storage.data_ptr()
            if ptr:
                storages[ptr] = max(storages.get(ptr, 0), storage.nbytes())
        except Exception:  # tensors without storage (meta, sparse, functional wrappers)
            continue
    return sum(storages.values())


def live_cpu_tensor_bytes() -> int:
    """Bytes of every live CPU tensor storage in this process, each storage counted once."""
    import torch

    # type() rather than isinstance(): proxies may run code from __class__.
    live = (o for o in gc.get_objects() if issubclass(type(o), torch.Tensor))
    return storage_bytes(live, "cpu")


class SimulatedDeviceMemory:
    """A deterministic "device" of fixed capacity whose usage is this process's CPU tensors."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = int(capacity_bytes)
        # The device this meter stands for (None until a scheduler binds it).
        self.gpu_id: int | None = None
        self.readings: list[MeterReading] = []
        self._lock = threading.Lock()

    def used_bytes(self, *, collect: bool = True) -> int:
        """Bytes currently used on the simulated device (live CPU tensor storages)."""
        if collect:
            gc.collect(1)
        return live_cpu_tensor_bytes()

    def record(self, *, collect: bool) -> MeterReading:
        """Measure, remember who asked (first frame outside the hook machinery), return it."""
        used = self.used_bytes(collect=collect)
        caller, is_draft = _describe_caller()
        with self._lock:
            free = self.capacity_bytes - used
            reading = MeterReading(len(self.readings), caller, is_draft, used, free)
            if len(self.readings) < _MAX_READINGS:
                self.readings.append(reading)
        return reading

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready state: capacity, current usage, and every reading so far."""
        used = self.used_bytes()
        return {
            "gpu_id": self.gpu_id,
            "capacity_bytes": self.capacity_bytes,
            "used_bytes": used,
            "free_bytes": self.capacity_bytes - used,
            "readings": [asdict(r) for r in self.readings],
        }


# Frames of this module and of HookRegistry's wrappers are not "the caller" (a plugin's are).
_SKIP_FRAME_FILES = (__file__, "hook_registry.py")


def _describe_caller() -> tuple[str, bool | None]:
    """``module.qualname`` of the first frame outside the hooks, and its ``is_draft_worker``."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.endswith(_SKIP_FRAME_FILES):
        frame = frame.f_back
    if frame is None:
        return "<unknown>", None
    module = frame.f_globals.get("__name__", "?")
    name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
    is_draft = getattr(frame.f_locals.get("self"), "is_draft_worker", None)
    return f"{module}.{name}", (bool(is_draft) if is_draft is not None else None)


_meter: SimulatedDeviceMemory | None = None
_meter_lock = threading.Lock()


def capacity_for_device(gpu_id: int | None) -> int:
    """Device ``gpu_id``'s entry in PER_DEVICE_CAPACITY_ENV, else CAPACITY_ENV (else 256 MiB)."""
    default = int(os.environ.get(CAPACITY_ENV, DEFAULT_CAPACITY_BYTES))
    per_device = [v for v in os.environ.get(PER_DEVICE_CAPACITY_ENV, "").split(",") if v.strip()]
    if gpu_id is not None and gpu_id < len(per_device):
        return int(per_device[gpu_id])
    return default


def device_meter() -> SimulatedDeviceMemory:
    """This process's meter, created on first use (capacity: :func:`capacity_for_device`)."""
    global _meter
    with _meter_lock:
        if _meter is None:
            _meter = SimulatedDeviceMemory(capacity_for_device(None))
        return _meter


def bind_meter_to_device(gpu_id: int) -> SimulatedDeviceMemory:
    """Give this process's meter the capacity of device ``gpu_id`` (a scheduler's device)."""
    meter = device_meter()
    capacity = capacity_for_device(gpu_id)
    with meter._lock:
        if meter.readings and capacity != meter.capacity_bytes:
            raise RuntimeError(
                f"simulated device already read {len(meter.readings)} times with "
                f"{meter.capacity_bytes} B as gpu {meter.gpu_id}; cannot rebind it to gpu "
                f"{gpu_id} ({capacity} B)"
            )
        meter.capacity_bytes = capacity
        meter.gpu_id = gpu_id
    return meter


def simulated_get_available_gpu_memory(
    original: Callable[..., float],
    device: str,
    gpu_id: int,
    distributed: bool = False,
    empty_cache: bool = True,
    cpu_group: Any = None,
) -> float:
    """AROUND for ``get_available_gpu_memory``: simulated free GiB on device "cpu"."""
    if device != "cpu":
        return original(device, gpu_id, distributed, empty_cache, cpu_group)
    free = float(device_meter().record(collect=empty_cache).free_bytes)
    if distributed:
        import torch

        tensor = torch.tensor(free, dtype=torch.float64)
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MIN, group=cpu_group)
        free = tensor.item()
    return free / (1 << 30)


def simulated_get_device_memory_capacity(
    original: Callable[..., Any], device: str | None = None
) -> Any:
    """AROUND for ``get_device_memory_capacity``: the simulated capacity in MiB on "cpu"."""
    if device != "cpu":
        return original(device)
    return device_meter().capacity_bytes / (1 << 20)


def bind_scheduler_device(
    scheduler: Any, server_args: Any, port_args: Any, *args: Any, **kwargs: Any
) -> None:
    """BEFORE for ``Scheduler.__init__``: this scheduler process simulates device ``gpu_id``."""
    gpu_id = args[0] if args else kwargs.get("gpu_id")
    if gpu_id is None:  # 0.5.23: the device its launcher published in this process
        try:
            from sglang.srt.runtime_context import get_device

            gpu_id = get_device().gpu_id
        except (ImportError, AttributeError, RuntimeError, ValueError):  # 0.5.13.x, or unset
            pass
    if getattr(server_args, "device", None) == "cpu" and gpu_id is not None:
        bind_meter_to_device(int(gpu_id))


def model_parallel_group_without_pynccl(
    original: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """AROUND for ``parallel_state.init_model_parallel_group``: no pynccl on device cpu."""
    from sglang.srt.utils import is_cpu

    if not is_cpu():
        return original(*args, **kwargs)
    import inspect

    bound = inspect.signature(original).bind(*args, **kwargs)
    bound.arguments["use_pynccl"] = False
    return original(*bound.args, **bound.kwargs)


def shim_hooks() -> list[tuple[str, Callable[..., Any], str]]:
    """(target, hook, HookType name) of every shim, for the harness's sitecustomize."""
    from harness.launch.sglang_release import imports_sgl_kernel_cpu_ops

    common = "sglang.srt.utils.common"
    # Both releases: the draft's set_embed_and_head calls torch.cuda.synchronize unconditionally.
    hooks: list[tuple[str, Callable[..., Any], str]] = [
        ("torch.cuda.synchronize", cuda_synchronize_without_device, "AROUND"),
        (f"{common}.get_available_gpu_memory", simulated_get_available_gpu_memory, "AROUND"),
        (f"{common}.get_device_memory_capacity", simulated_get_device_memory_capacity, "AROUND"),
        ("sglang.srt.managers.scheduler.Scheduler.__init__", bind_scheduler_device, "BEFORE"),
        (
            "sglang.srt.distributed.parallel_state.init_model_parallel_group",
            model_parallel_group_without_pynccl,
            "AROUND",
        ),
    ]
    if not imports_sgl_kernel_cpu_ops():
        # 0.5.16+ runs its KV warm-up through the sgl_kernel test double: 0.5.13.x-only.
        kv_copy = "sglang.srt.mem_cache.memory_pool.MHATokenToKVPool._init_kv_copy_and_warmup"
        hooks.insert(0, (kv_copy, noop_kv_copy_and_warmup, "REPLACE"))
    return hooks
