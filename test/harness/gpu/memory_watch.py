"""Peak device memory through a server's start-up, per device and phase, from the driver (NVML)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.gpu.device_memory import NvmlMemoryReader

CAPTURE_BEGIN = "graph begin"  # both releases' capture-begin lines, case folded
INTERVAL_S = 0.25
# ``read(index) -> (used_bytes, total_bytes)`` of one device, by NVML index.
Reader = Callable[[int], tuple[int, int]]


@dataclass
class MemoryWatch:
    read: Reader
    devices: Sequence[int]
    log_path: Path
    interval_s: float = INTERVAL_S
    peaks: dict[str, dict[int, int]] = field(default_factory=lambda: {"init": {}, "capture": {}})
    free_after_capture: dict[int, int] = field(default_factory=dict)
    samples: int = 0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def phase(self) -> str:
        text = self.log_path.read_bytes() if self.log_path.exists() else b""
        return "capture" if CAPTURE_BEGIN in text.decode(errors="replace").lower() else "init"

    def sample(self) -> None:
        phase = self.phase()
        for index in self.devices:
            try:
                used, _ = self.read(index)
            except Exception as error:  # a driver hiccup must not end the watch
                self.errors.append(f"device {index}: {error}")
                continue
            peak = self.peaks[phase]
            peak[index] = max(peak.get(index, 0), used)
        self.samples += 1

    def start(self) -> MemoryWatch:
        def run() -> None:
            while not self._stop.is_set():
                self.sample()
                self._stop.wait(self.interval_s)

        self._thread = threading.Thread(target=run, name="memory-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        """Stop, read free memory after capture, and :meth:`report` (a second call: report)."""
        if self._stop.is_set():
            return self.report()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample()
        for index in self.devices:
            try:
                used, total = self.read(index)
                self.free_after_capture[index] = total - used
            except Exception as error:
                self.errors.append(f"device {index}: {error}")
        return self.report()

    def report(self) -> dict[str, Any]:
        return {
            "peak_used_bytes": {p: dict(v) for p, v in self.peaks.items()},
            "free_after_capture_bytes": dict(self.free_after_capture),
            "samples": self.samples,
            "errors": self.errors[:5],
        }


def nvml_reader() -> Reader | None:
    try:
        return NvmlMemoryReader().used_and_total
    except Exception:  # no pynvml, or NVML refuses to initialise
        return None


def watch(log_path: Path, devices: Sequence[int], read: Reader | None = None) -> MemoryWatch | None:
    read = read or nvml_reader()
    if read is None:
        return None
    return MemoryWatch(read, list(devices), log_path).start()
