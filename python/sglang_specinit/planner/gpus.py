"""Device presets, the planned device (:class:`DeviceSpec`) and byte-size parsing."""

from __future__ import annotations

import re
from dataclasses import dataclass

MIB = 1 << 20
GIB = 1 << 30

# CUDA context, NCCL groups and driver reservations before weights load.
CUDA_CONTEXT_ALLOWANCE_BYTES = 1 * GIB


@dataclass(frozen=True)
class GpuPreset:
    name: str
    total_mib: int
    description: str
    # CUDA compute capability x 10 (sglang's get_device_sm): backends and graph defaults.
    sm: int | None = None

    @property
    def total_bytes(self) -> int:
        return self.total_mib * MIB


# nvidia-smi's memory.total (MiB) of each name's common SKU; NVIDIA's compute capability.
_PRESETS = (
    GpuPreset("H100-80GB", 81559, "H100 SXM5 80GB HBM3", 90),
    GpuPreset("H100-94GB", 95830, "H100 NVL 94GB HBM3", 90),
    GpuPreset("H200-141GB", 143771, "H200 SXM 141GB HBM3e", 90),
    GpuPreset("A100-80GB", 81920, "A100 SXM4 80GB", 80),
    GpuPreset("A100-40GB", 40960, "A100 SXM4 40GB", 80),
    GpuPreset("L40S", 46068, "L40S 48GB GDDR6", 89),
    GpuPreset("RTX-4090", 24564, "GeForce RTX 4090 24GB", 89),
    GpuPreset("B200", 183359, "B200 180GB HBM3e", 100),
)
GPU_PRESETS: dict[str, GpuPreset] = {p.name: p for p in _PRESETS}
DEFAULT_GPU = "H100-80GB"


def get_preset(name: str) -> GpuPreset:
    """The preset called ``name`` (case-insensitive)."""
    for preset in _PRESETS:
        if preset.name.lower() == name.lower():
            return preset
    raise ValueError(f"unknown --gpu preset {name!r}; valid presets: {', '.join(GPU_PRESETS)}")


def pre_load_free_bytes(total_bytes: int) -> int:
    return max(total_bytes - CUDA_CONTEXT_ALLOWANCE_BYTES, 0)


@dataclass(frozen=True)
class DeviceSpec:
    """The device the plan is for: total memory (heuristic input) and pre-load free bytes."""

    name: str
    total_bytes: int
    pre_load_free_bytes: int
    # A server's measured resident bytes replacing the checkpoint estimate; None: estimate.
    resident_bytes: int | None = None
    # CUDA compute capability (90 = sm_90) of a preset; None: not known (--device-memory).
    sm: int | None = None

    @property
    def capacity_mib(self) -> float:
        return self.total_bytes / MIB


def presets_help() -> str:
    lines = [
        f"{p.name}: {p.total_mib} MiB = {p.total_bytes} bytes ({p.description})" for p in _PRESETS
    ]
    lines.append(
        f"pre-load free bytes = total - {CUDA_CONTEXT_ALLOWANCE_BYTES // MIB} MiB "
        "(CUDA context, NCCL groups, driver reservations; override with --pre-load-free-bytes)"
    )
    return "; ".join(lines)


# "", b; kb, mb, gb, tb (decimal); kib, mib, gib, tib (binary).
_UNITS = {"": 1, "b": 1}
for _power, _prefix in enumerate("kmgt", start=1):
    _UNITS.update({f"{_prefix}b": 1000**_power, f"{_prefix}ib": 1024**_power})
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str) -> int:
    """``"80GiB"``, ``"141GB"``, ``"24000MiB"``, ``"123"`` -> bytes (GB decimal, GiB binary)."""
    match = _SIZE_RE.match(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"cannot read a size from {text!r}; use e.g. 80GiB, 141GB, 24000MiB or plain bytes"
        )
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f"size must be > 0, got {text!r}")
    return value
