"""Run a real ``sglang.launch_server`` for one GPU case, with the harness's shared pieces."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.gpu import device_memory, time_budget
from harness.gpu.dry_run import gpu_env, launch_argv
from harness.gpu.gpu_cases import Case
from harness.launch.server_process import (
    RunFiles,
    ServerHandle,
    SGLangStartError,
    running_server,
)
from harness.reports import device_probe

# This process's first launch JIT-compiles FlashInfer's kernels (harness.gpu.time_budget).
_LAUNCHED: list[bool] = []
# SGLang's launcher drains and kills its own tree on SIGTERM; give it time before SIGKILL.
TEARDOWN_GRACE_S = 60.0
LOG_STEM = "server"  # the server's log is <work_dir>/server.log
_GATED_HINTS = ("GatedRepoError", "gated repo", "401 Client Error", "Access to model")


@dataclass
class GpuServer:
    """A healthy GPU server: SGLang's handle plus where its log stood when it became healthy."""

    handle: ServerHandle
    ready_log_offset: int
    # NVML peaks per device during init and capture, free after capture (None without NVML).
    device_memory: dict[str, Any] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)

    def _log_bytes(self) -> bytes:
        path = self.handle.log_path
        return path.read_bytes() if path.exists() else b""

    def startup_log(self) -> str:
        """What the server logged until ``/health`` first answered."""
        return self._log_bytes()[: self.ready_log_offset].decode(errors="replace")

    def log_after_ready(self) -> str:
        """What the server logged from ``/health``'s first answer on."""
        return self._log_bytes()[self.ready_log_offset :].decode(errors="replace")


@contextmanager
def gpu_server(
    case: Case,
    work_dir: Path,
    *,
    plugin: bool,
    mem_fraction: str,
    deterministic_flag: str | None = None,
) -> Iterator[GpuServer]:
    """``launch_server`` for ``case`` until the block ends; then its whole tree is gone."""
    files = RunFiles.make(work_dir, LOG_STEM)
    probe_dir = files.work_dir / "probe"
    probe_dir.mkdir(exist_ok=True)
    argv = launch_argv(case, mem_fraction, deterministic_flag)
    env = gpu_env(
        plugin=plugin, report_dir=files.report_dir, probe_dir=probe_dir, case_env=dict(case.env)
    )
    handle: ServerHandle | None = None
    try:  # the NVML indices the case's ranks run on (none where NVML cannot say)
        reader = device_memory.NvmlMemoryReader()
        devices = device_memory.devices_for_case(case.tp, reader.device_count(), reader.uuids())
    except Exception:  # no driver: the watch has nothing to read
        devices = []
    watch = device_memory.watch(files.log_path, devices)
    # Read before this launch is counted (the first launch compiles the kernels).
    limits = {"startup_timeout_s": time_budget.startup_s(first=not _LAUNCHED)}
    _LAUNCHED.append(True)
    try:
        with running_server(
            argv, env=env, files=files, grace_s=TEARDOWN_GRACE_S, poll_s=2.0, **limits
        ) as handle:
            memory = watch.stop() if watch is not None else None
            yield GpuServer(handle, files.log_path.stat().st_size, memory)
    except SGLangStartError as error:
        if not any(h in error.log_tail for h in _GATED_HINTS):
            raise
        models = ", ".join(m for m in (case.target, case.draft) if m)
        raise SGLangStartError(
            f"{error.args[0]}\nA checkpoint is gated: set HF_TOKEN to a token with access to "
            f"{models} (or point SPECINIT_GPU_{case.name.upper()}_TARGET/_DRAFT elsewhere).",
            log_tail="",
            reports=[],
        ) from error
    finally:
        if watch is not None:
            watch.stop()
    if handle is not None and handle.leftovers:
        raise AssertionError(
            "server processes outlived the teardown (they hold GPU memory): "
            + "; ".join(f"pid {m.pid} [{m.state}] {m.cmdline[:120]}" for m in handle.leftovers)
        )


def require(case: Case) -> None:
    """Skip a case its profile cannot run, or that needs more GPUs than this runner has."""
    import torch

    if case.skip:
        pytest.skip(f"{case.name}: {case.skip}")
    if torch.cuda.device_count() < case.tp:
        count = torch.cuda.device_count()
        pytest.skip(f"{case.name} needs {case.tp} GPUs, this runner has {count}")


def breakdowns(server: ServerHandle | GpuServer) -> list[dict[str, Any]]:
    """The plugin's memory breakdown of every rank (``memory-rank<N>.json``), by rank."""
    found = [json.loads(p.read_text()) for p in server.report_dir.glob("memory-rank*.json")]
    return sorted(found, key=lambda b: b["tp_rank"])


def probe_records(work_dir: Path) -> list[list[dict[str, Any]]]:
    """The probe's records of each scheduler process in ``work_dir``, by TP rank."""
    records = device_probe.scheduler_records(work_dir / "probe")
    return sorted(records, key=lambda rs: next(r["tp_rank"] for r in rs if "tp_rank" in r))
