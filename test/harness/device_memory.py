"""Device memory between GPU cases: wait until the last server's memory is released.

Why: a CUDA process's memory is returned only once the driver has torn its context down,
which can take seconds after the process is gone (and forever when a scheduler survived its
launcher). A case that starts earlier measures less free memory than it should, and a TP case
whose ranks see unequal free memory is refused by SGLang ("The memory capacity is unbalanced").
So the GPU suite records each device's used memory before the first server and, before every
case, waits until each device is back within a tolerance of that baseline, with a bound.

Readers: :class:`NvmlMemoryReader` (``pynvml``, shipped with sglang as ``nvidia-ml-py``), else
:class:`NvidiaSmiMemoryReader`. Neither creates a CUDA context in the test process, which
would itself hold memory on the device. NVML numbers devices physically, so the indices come
from ``CUDA_VISIBLE_DEVICES`` when it lists them (:func:`visible_device_indices`).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

MIB = 1 << 20


class DeviceMemoryReader(Protocol):
    """Used memory of one device, by physical index, from the driver's point of view."""

    def used_bytes(self, index: int) -> int: ...

    def holder_pids(self, index: int) -> list[int]: ...


class NvmlMemoryReader:
    """Reads ``nvmlDeviceGetMemoryInfo(...).used`` through ``pynvml``."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml

    def device_count(self) -> int:
        return int(self._nvml.nvmlDeviceGetCount())

    def used_bytes(self, index: int) -> int:
        handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
        return int(self._nvml.nvmlDeviceGetMemoryInfo(handle).used)

    def holder_pids(self, index: int) -> list[int]:
        handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
        return sorted(p.pid for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(handle))


class NvidiaSmiMemoryReader:
    """Reads ``nvidia-smi --query-gpu=memory.used`` (MiB resolution)."""

    def _query(self, args: list[str]) -> list[str]:
        out = subprocess.run(
            ["nvidia-smi", *args, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return [line.strip() for line in out.stdout.splitlines() if line.strip()]

    def device_count(self) -> int:
        return len(self._query(["--query-gpu=index"]))

    def used_bytes(self, index: int) -> int:
        (used_mib,) = self._query(["-i", str(index), "--query-gpu=memory.used"])
        return int(used_mib) * MIB

    def holder_pids(self, index: int) -> list[int]:
        rows = self._query(["-i", str(index), "--query-compute-apps=pid"])
        return sorted(int(r) for r in rows if r.isdigit())


def default_reader() -> NvmlMemoryReader | NvidiaSmiMemoryReader:
    """NVML when ``pynvml`` imports and initialises, else ``nvidia-smi``."""
    try:
        return NvmlMemoryReader()
    except Exception:  # no pynvml, or NVML refuses to initialise
        return NvidiaSmiMemoryReader()


def visible_device_indices(device_count: int, env: Mapping[str, str] | None = None) -> list[int]:
    """Physical indices of the devices CUDA will use (``CUDA_VISIBLE_DEVICES`` order).

    UUID entries cannot be mapped without NVML lookups; then every device is watched.
    """
    listed = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if listed is None or not listed.strip():
        return list(range(device_count))
    parts = [p.strip() for p in listed.split(",") if p.strip()]
    if all(p.isdigit() for p in parts):
        return [int(p) for p in parts]
    return list(range(device_count))


class DeviceMemoryNotReleased(RuntimeError):
    """A device stayed above its baseline for longer than the bound."""


@dataclass
class MemoryWait:
    """How long the wait took and the last reading of each device (bytes used)."""

    waited_s: float
    used: dict[int, int] = field(default_factory=dict)


def read_baselines(reader: DeviceMemoryReader, indices: list[int]) -> dict[int, int]:
    """Used bytes of each device now (take it before the first server starts)."""
    return {i: reader.used_bytes(i) for i in indices}


def wait_until_released(
    reader: DeviceMemoryReader,
    baselines: Mapping[int, int],
    *,
    tolerance_bytes: int,
    timeout_s: float,
    poll_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> MemoryWait:
    """Wait until every device uses at most its baseline + ``tolerance_bytes``.

    Raises :class:`DeviceMemoryNotReleased` after ``timeout_s``, naming each device still
    above it, by how much, and the processes the driver says hold memory there.
    """
    start = clock()
    while True:
        used = {i: reader.used_bytes(i) for i in baselines}
        over = {
            i: used[i] - baselines[i] for i in baselines if used[i] > baselines[i] + tolerance_bytes
        }
        if not over:
            return MemoryWait(waited_s=clock() - start, used=used)
        if clock() - start >= timeout_s:
            lines = [
                f"  device {i}: {used[i] / MIB:.0f} MiB used, baseline "
                f"{baselines[i] / MIB:.0f} MiB (+{extra / MIB:.0f} MiB > "
                f"{tolerance_bytes / MIB:.0f} MiB tolerance), "
                f"held by pids {reader.holder_pids(i) or 'none listed'}"
                for i, extra in sorted(over.items())
            ]
            raise DeviceMemoryNotReleased(
                f"device memory not back to its baseline after {timeout_s:g} s; the previous "
                "server (or another process) still holds it:\n" + "\n".join(lines)
            )
        sleep(poll_s)
