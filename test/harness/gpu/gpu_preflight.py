"""Preflight of the GPU command: can this machine run sglang 0.5.13.post1's wheels at all?"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys

MIN_CUDA = (13, 0)
MIN_DRIVER_MAJOR = 580  # the first driver branch with CUDA 13.0
MIN_GLIBC = (2, 34)
MIN_GLIBC_SHOWN = ".".join(map(str, MIN_GLIBC))
WHEEL = "sglang 0.5.13.post1"


# nvidia-smi's banner ("Driver Version: 580.65.06", "CUDA Version: 13.0"); glibc's version
# from os.confstr("CS_GNU_LIBC_VERSION") ("glibc 2.35").
DRIVER = r"Driver Version:\s*([\d.]+)"
CUDA = r"CUDA Version:\s*([\d.]+)"
GLIBC = r"glibc\s+([\d.]+)"


def _shown(text: str | None, pattern: str) -> str:
    match = re.search(pattern, text or "")
    return match.group(1) if match else "unknown"


def _version(text: str | None, pattern: str) -> tuple[int, ...] | None:
    shown = _shown(text, pattern)
    return None if shown == "unknown" else tuple(int(part) for part in shown.split("."))


def problems(banner: str | None, libc: str | None) -> list[str]:
    """What this machine lacks for the wheels; ``banner`` is None without ``nvidia-smi``."""
    found = []
    if banner is None:
        found.append("no NVIDIA driver (nvidia-smi not found or failing)")
    else:
        cuda, driver = _version(banner, CUDA), _version(banner, DRIVER)
        ok = cuda >= MIN_CUDA if cuda else bool(driver and driver[0] >= MIN_DRIVER_MAJOR)
        if not ok:
            found.append(
                f"driver {_shown(banner, DRIVER)} supports CUDA {_shown(banner, CUDA)}, not "
                f"CUDA 13 (install driver {MIN_DRIVER_MAJOR} or newer)"
            )
    glibc = _version(libc, GLIBC)
    if glibc is None or glibc < MIN_GLIBC:
        found.append(
            f"glibc {_shown(libc, GLIBC)} is older than {MIN_GLIBC_SHOWN} (the wheels are "
            "manylinux_2_34: use a runner image like Ubuntu 22.04 or newer)"
        )
    return found


def verdict(banner: str | None, libc: str | None) -> tuple[int, str]:
    found = problems(banner, libc)
    if not found:
        return 0, (
            f"GPU preflight: ok (driver {_shown(banner, DRIVER)}, CUDA {_shown(banner, CUDA)}, "
            f"glibc {_shown(libc, GLIBC)})"
        )
    return 1, (
        f"GPU preflight: FAILED, {WHEEL} needs an NVIDIA driver with CUDA 13 support and glibc "
        f">= {MIN_GLIBC_SHOWN}: " + "; ".join(found)
    )


def main() -> int:
    banner = libc = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60)
        banner = done.stdout if done.returncode == 0 else None
    with contextlib.suppress(ValueError, OSError):
        libc = os.confstr("CS_GNU_LIBC_VERSION")
    code, line = verdict(banner, libc)
    print(line, file=sys.stderr if code else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main())
