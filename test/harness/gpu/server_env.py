"""The command and environment of one GPU server, shared by the suite and its dry run."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from harness.gpu import device_memory, storage_identity
from harness.gpu.gpu_cases import Case
from harness.launch.server_process import (
    cpu_double_problems,
    sglang_process_env,
    without_cpu_doubles,
)
from harness.reports import device_probe

REPORT_DIR_ENV = "SGLANG_SPECINIT_REPORT_DIR"


def launch_argv(
    case: Case, mem_fraction: str, deterministic_flag: str | None, python: str | None = None
) -> list[str]:
    args = case.launch_args(mem_fraction, deterministic_flag)
    return [python or sys.executable, "-m", "sglang.launch_server", *args]


def gpu_env(
    *,
    plugin: bool,
    report_dir: Path,
    probe_dir: Path,
    case_env: Mapping[str, str] | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """One GPU server's environment; raises a ``RuntimeError`` on a CPU double."""
    env = sglang_process_env(
        plugin=plugin,
        base=without_cpu_doubles(os.environ if base is None else base),
        cpu_doubles=False,
        extra={
            **(case_env or {}),
            REPORT_DIR_ENV: str(report_dir),
            device_probe.PROBE_ENV: "1",
            device_probe.PROBE_DIR_ENV: str(probe_dir),
            storage_identity.IDENTITY_ENV: "1",
            storage_identity.IDENTITY_DIR_ENV: str(probe_dir),
            device_memory.CUDA_DEVICE_ORDER[0]: device_memory.CUDA_DEVICE_ORDER[1],
        },
    )
    # FlashInfer's JIT runs `ninja` by name: the interpreter's own bin/ goes first.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    problems = cpu_double_problems(env)
    if problems:
        raise RuntimeError("a GPU server's environment has a CPU double: " + "; ".join(problems))
    return env


def changed_variables(env: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
    """What ``env`` sets or changes relative to ``base`` (``""`` for a variable it removes)."""
    changed = {k: v for k, v in env.items() if base.get(k) != v}
    changed.update({k: "" for k in base if k not in env})
    return dict(sorted(changed.items()))
