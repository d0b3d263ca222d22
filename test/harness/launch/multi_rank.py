"""Launches that are expected to end on their own (fail, or be signalled): bounded, checked."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.launch import engine
from harness.launch.processes import (
    GroupMember,
    format_rank_tails,
    free_port,
    group_members,
    kill_group,
    start_in_own_group,
)
from harness.launch.server_process import RunFiles, read_reports


def running_members(pgid: int) -> list[GroupMember]:
    """Members of process group ``pgid`` that still run (exited-but-unreaped ones excluded)."""
    return [m for m in group_members(pgid) if m.state != "Z"]


@dataclass
class EndedLaunch:
    """A launch that ended on its own (or was signalled by the test) within the bound."""

    returncode: int
    elapsed_s: float
    log: str
    reports: list[dict[str, Any]]
    work_dir: Path
    # Processes of the launch still running ``grace_s`` after the launcher exited.
    survivors: list[GroupMember] = field(default_factory=list)
    signalled_at_s: float | None = None
    # ``time.time()`` when the launcher was seen to have exited (to compare with markers that
    # scheduler processes wrote with their own clock reading).
    ended_wall_time: float = 0.0

    def rank_tails(self, lines: int = 12) -> str:
        return format_rank_tails(self.log, lines)


def assert_ended_cleanly(run: EndedLaunch) -> None:
    """Non-zero exit, and no process of the launch's session outlived it."""
    assert run.returncode != 0, run.rank_tails()
    assert run.survivors == [], run.survivors


class LaunchDidNotEnd(AssertionError):
    """The launch was still running at the bound: a hang. The message has every rank's tail."""


def run_server_to_end(
    model_path: str | Path,
    work_dir: Path,
    *,
    plugin: bool = True,
    bound_s: float = 240.0,
    grace_s: float = 15.0,
    signal_on_marker: tuple[str, int] | None = None,
    on_start: Callable[[int], None] | None = None,
    capacity_bytes: int = engine.DEFAULT_CAPACITY_BYTES,
    extra_env: Mapping[str, str] | None = None,
    **server_args: Any,
) -> EndedLaunch:
    """Run ``launch_server`` on CPU until it exits, for launches that must end by themselves."""
    files = RunFiles.make(work_dir, "server")
    report_dir, log_path = files.report_dir, files.log_path
    argv, env, _ = engine.server_command(
        model_path,
        files,
        plugin=plugin,
        capacity_bytes=capacity_bytes,
        extra_env=extra_env,
        **server_args,
    )
    argv += ["--host", "127.0.0.1", "--port", str(free_port())]
    proc = start_in_own_group(argv, log_path=log_path, env=env, cwd=work_dir)
    started = time.monotonic()
    if on_start is not None:
        on_start(proc.pid)
    signalled_at = None
    try:
        while proc.poll() is None:
            elapsed = time.monotonic() - started
            if elapsed > bound_s:
                raise LaunchDidNotEnd(
                    f"launch still running after {bound_s:.0f} s (a rank may be waiting in a "
                    f"collective)\n{format_rank_tails(_read(log_path))}"
                )
            if (
                signal_on_marker is not None
                and signalled_at is None
                and any(report_dir.glob(signal_on_marker[0]))
            ):
                proc.send_signal(signal_on_marker[1])
                signalled_at = elapsed
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        ended_wall_time = time.time()
        deadline = time.monotonic() + grace_s
        while (survivors := running_members(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        return EndedLaunch(
            returncode=proc.returncode,
            elapsed_s=elapsed,
            log=_read(log_path),
            reports=read_reports(report_dir),
            work_dir=work_dir,
            survivors=survivors,
            signalled_at_s=signalled_at,
            ended_wall_time=ended_wall_time,
        )
    finally:
        kill_group(proc, grace_s=3.0)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
