"""Multi-rank launches that are expected to fail: bounded waits, per-rank logs, leftovers.

Why: at TP > 1 a failure on one rank can leave another waiting in a collective, which looks like
a hang rather than an error. A test must therefore (a) bound every wait and, when the bound
trips, show what each rank last logged; (b) check that the launch really ended everywhere: the
launcher exited with a non-zero code and no process of its session is still alive.

SGLang prefixes each scheduler's log lines with its ranks (``[2026-01-01 00:00:00 DP0 TP1]``);
lines without a rank tag (the launcher, tracebacks printed by it) go to ``launcher``, and
untagged continuation lines (a traceback) follow the tagged line they continue.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import engine

_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?P<ranks>(?: [A-Z_]+\d+)*)\]")
LAUNCHER = "launcher"


def rank_log_lines(text: str) -> dict[str, list[str]]:
    """Log lines grouped by the rank tag of the line (``TP0``, ``DP1 TP1``, ``launcher``)."""
    groups: dict[str, list[str]] = {}
    current = LAUNCHER
    for line in text.splitlines():
        match = _PREFIX.match(line)
        if match:
            current = match.group("ranks").strip() or LAUNCHER
        groups.setdefault(current, []).append(line)
    return groups


def format_rank_tails(text: str, lines: int = 12) -> str:
    """Each rank's last ``lines`` log lines, one block per rank."""
    blocks = [
        f"--- last {lines} lines of {rank} ---\n" + "\n".join(group[-lines:])
        for rank, group in sorted(rank_log_lines(text).items())
    ]
    return "\n".join(blocks) if blocks else "<empty log>"


def session_processes(session_id: int) -> list[tuple[int, str]]:
    """``(pid, command line)`` of every live process in session ``session_id`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # Fields after the parenthesised command: state ppid pgrp session ...
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[3]) != session_id or fields[0] == "Z":
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        found.append((int(entry.name), cmdline.strip()))
    return found


@dataclass
class EndedLaunch:
    """A launch that ended on its own (or was signalled by the test) within the bound."""

    returncode: int
    elapsed_s: float
    log: str
    reports: list[dict[str, Any]]
    work_dir: Path
    # Processes of the launch's session still alive ``grace_s`` after the launcher exited.
    survivors: list[tuple[int, str]] = field(default_factory=list)
    signalled_at_s: float | None = None
    # ``time.time()`` when the launcher was seen to have exited (to compare with markers that
    # scheduler processes wrote with their own clock reading).
    ended_wall_time: float = 0.0

    def rank_tails(self, lines: int = 12) -> str:
        return format_rank_tails(self.log, lines)


class LaunchDidNotEnd(AssertionError):
    """The launch was still running at the bound: a hang. The message has every rank's tail."""


def run_server_to_end(
    model_path: str | os.PathLike[str],
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
    """Run ``launch_server`` on CPU until it exits, for launches that must fail.

    ``signal_on_marker=(glob, signum)``: once a file matching ``glob`` appears in the report
    directory, send ``signum`` to the launcher (as an operator would). ``on_start`` gets the
    launcher's pid (also its session id) as soon as it runs. Raises
    :class:`LaunchDidNotEnd` if the launcher is still alive after ``bound_s``; the launch's
    whole session is killed before returning or raising, so nothing outlives the test.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    report_dir = work_dir / "reports"
    report_dir.mkdir(exist_ok=True)
    log_path = work_dir / "server.log"
    kwargs = engine.cpu_engine_kwargs(
        model_path,
        host="127.0.0.1",
        port=engine.free_port(),
        skip_server_warmup=True,
        **server_args,
    )
    argv = [sys.executable, "-m", "sglang.launch_server", *engine.server_args_to_cli(kwargs)]
    env = engine.cpu_env(
        plugin=plugin,
        capacity_bytes=capacity_bytes,
        report_dir=report_dir,
        extra={
            "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0",
            **engine._parallel_env(kwargs, extra_env),
        },
    )
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(work_dir),
            start_new_session=True,
            preexec_fn=engine._die_with_parent,
        )
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
                signal_on_marker
                and signalled_at is None
                and any(report_dir.glob(signal_on_marker[0]))
            ):
                proc.send_signal(signal_on_marker[1])
                signalled_at = elapsed
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        ended_wall_time = time.time()
        survivors = _wait_for_session_to_empty(proc.pid, grace_s)
        return EndedLaunch(
            returncode=proc.returncode,
            elapsed_s=elapsed,
            log=_read(log_path),
            reports=engine.read_reports(report_dir),
            work_dir=work_dir,
            survivors=survivors,
            signalled_at_s=signalled_at,
            ended_wall_time=ended_wall_time,
        )
    finally:
        _kill_session(proc)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _wait_for_session_to_empty(session_id: int, grace_s: float) -> list[tuple[int, str]]:
    deadline = time.monotonic() + grace_s
    while True:
        alive = session_processes(session_id)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def _kill_session(proc: subprocess.Popen[Any]) -> None:
    for pid, _ in session_processes(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
