"""Device memory from NVML: waiting for release, and each device's per-phase peak."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MIB = 1 << 20
# CUDA numbers devices fastest first by default, NVML by PCI bus id; this makes them agree.
CUDA_DEVICE_ORDER = ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")


class NvmlMemoryReader:
    """pynvml (nvidia-ml-py, a requirement of every sglang release the suite runs)."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml

    def device_count(self) -> int:
        return int(self._nvml.nvmlDeviceGetCount())

    def used_bytes(self, index: int) -> int:
        return self.used_and_total(index)[0]

    def used_and_total(self, index: int) -> tuple[int, int]:
        info = self._nvml.nvmlDeviceGetMemoryInfo(self._nvml.nvmlDeviceGetHandleByIndex(index))
        return int(info.used), int(info.total)

    def holder_pids(self, index: int) -> list[int]:
        handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
        return sorted(p.pid for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(handle))

    def uuids(self) -> dict[str, int]:
        out = {}
        for index in range(self.device_count()):
            uuid = self._nvml.nvmlDeviceGetUUID(self._nvml.nvmlDeviceGetHandleByIndex(index))
            out[uuid.decode() if isinstance(uuid, bytes) else str(uuid)] = index
        return out


def devices_for_case(
    tp: int,
    device_count: int,
    uuids: Mapping[str, int] | None = None,
    env: Mapping[str, str] | None = None,
) -> list[int]:
    """NVML indices of CUDA devices 0..tp-1 through ``CUDA_VISIBLE_DEVICES`` (indices or UUID
    prefixes); a list that cannot be mapped means every device."""
    listed = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return list(range(min(tp, device_count)))
    physical = []
    for part in (p.strip() for p in listed.split(",")):
        if not part:
            break  # CUDA stops at the first invalid entry
        if part.isdigit():
            physical.append(int(part))
            continue
        matches = [i for uuid, i in (uuids or {}).items() if uuid.startswith(part)]
        if len(matches) != 1:
            return list(range(device_count))  # a MIG or unknown id: watch everything
        physical.append(matches[0])
    return physical[:tp]


class DeviceMemoryNotReleased(RuntimeError):
    pass


def wait_until_released(
    reader: Any,
    baselines: Mapping[int, int],
    *,
    tolerance_bytes: int,
    timeout_s: float,
    poll_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[int, int]:
    """Poll ``reader`` (``used_bytes``, ``holder_pids`` by index) until every device is back
    within ``tolerance_bytes`` of its baseline; its last readings."""
    start = time.monotonic()
    while True:
        used = {i: reader.used_bytes(i) for i in baselines}
        over = {
            i: used[i] - baselines[i] for i in baselines if used[i] > baselines[i] + tolerance_bytes
        }
        if not over:
            return used
        if time.monotonic() - start >= timeout_s:
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


CAPTURE_BEGIN = "graph begin"  # both releases' capture-begin lines, case folded
# ``read(index) -> (used_bytes, total_bytes)`` of one device, by NVML index.
Reader = Callable[[int], tuple[int, int]]


@dataclass
class MemoryWatch:
    read: Reader
    devices: Sequence[int]
    log_path: Path
    peaks: dict[str, dict[int, int]] = field(default_factory=lambda: {"init": {}, "capture": {}})
    free_after_capture: dict[int, int] = field(default_factory=dict)
    samples: int = 0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def phase(self) -> str:
        text = self.log_path.read_bytes() if self.log_path.exists() else b""
        return "capture" if CAPTURE_BEGIN in text.decode(errors="replace").lower() else "init"

    def _readings(self) -> dict[int, tuple[int, int]]:
        found = {}
        for index in self.devices:
            try:
                found[index] = self.read(index)
            except Exception as error:  # a driver hiccup must not end the watch
                self.errors.append(f"device {index}: {error}")
        return found

    def sample(self) -> None:
        peak = self.peaks[self.phase()]
        for index, (used, _) in self._readings().items():
            peak[index] = max(peak.get(index, 0), used)
        self.samples += 1

    def start(self) -> MemoryWatch:
        def run() -> None:
            while not self._stop.is_set():
                self.sample()
                self._stop.wait(0.25)

        self._thread = threading.Thread(target=run, name="memory-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        """Stop (once), read free memory after capture; the peaks, free memory and errors."""
        if not self._stop.is_set():
            self._stop.set()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self.sample()
            for index, (used, total) in self._readings().items():
                self.free_after_capture[index] = total - used
        return {
            "peak_used_bytes": {p: dict(v) for p, v in self.peaks.items()},
            "free_after_capture_bytes": dict(self.free_after_capture),
            "samples": self.samples,
            "errors": self.errors[:5],
        }


def watch(log_path: Path, devices: Sequence[int]) -> MemoryWatch | None:
    try:
        read = NvmlMemoryReader().used_and_total
    except Exception:  # no pynvml, or NVML refuses to initialise
        return None
    return MemoryWatch(read, list(devices), log_path).start()
