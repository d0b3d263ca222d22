"""Waiting for the last GPU case's memory to be released (:mod:`harness.gpu.device_memory`),
against scripted NVML readings (no device here)."""

from __future__ import annotations

import pytest
from harness.gpu.device_memory import (
    MIB,
    DeviceMemoryNotReleased,
    read_baselines,
    wait_until_released,
)

GIB = 1 << 30


class FakeDeviceMemoryReader:
    """Test double for NVML while a dead server's CUDA context is torn down: each read of a
    device returns its next scripted ``used`` value (the last one repeats), and is counted."""

    def __init__(self, script: dict[int, list[int]], holders: dict[int, list[int]] | None = None):
        self.script = {i: list(values) for i, values in script.items()}
        self.holders = holders or {}
        self.reads = {i: 0 for i in script}

    def used_bytes(self, index: int) -> int:
        values = self.script[index]
        value = values[min(self.reads[index], len(values) - 1)]
        self.reads[index] += 1
        return value

    def holder_pids(self, index: int) -> list[int]:
        return self.holders.get(index, [])


def test_waits_until_every_device_is_back_near_its_baseline() -> None:
    baseline_reader = FakeDeviceMemoryReader({0: [1 * GIB], 1: [2 * GIB]})
    baselines = read_baselines(baseline_reader, [0, 1])
    # Device 0 drains in three polls, device 1 is already clean.
    reader = FakeDeviceMemoryReader({0: [70 * GIB, 30 * GIB, 1 * GIB + 100 * MIB], 1: [2 * GIB]})
    sleeps: list[float] = []
    wait = wait_until_released(
        reader, baselines, tolerance_bytes=512 * MIB, timeout_s=60, poll_s=2, sleep=sleeps.append
    )
    assert sleeps == [2, 2]
    assert wait.used == {0: 1 * GIB + 100 * MIB, 1: 2 * GIB}
    assert reader.reads == {0: 3, 1: 3}


def test_gives_up_after_the_bound_and_names_the_holders() -> None:
    reader = FakeDeviceMemoryReader({0: [60 * GIB]}, holders={0: [4242]})
    with pytest.raises(DeviceMemoryNotReleased) as info:
        wait_until_released(
            reader, {0: 1 * GIB}, tolerance_bytes=512 * MIB, timeout_s=0.3, poll_s=0.05
        )
    message = str(info.value)
    assert "device 0" in message and "4242" in message and "+60416 MiB" in message
