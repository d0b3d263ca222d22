"""Process plumbing shared by the CPU harness and the GPU suite: ports, process groups, logs."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

# SGLang derives its gRPC port as --port + 10000 and rejects anything above 65535.
MAX_HTTP_PORT = 65535 - 10000
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def free_port(attempts: int = 200) -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, low enough for SGLang's gRPC port."""
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port <= MAX_HTTP_PORT:
            return port
    raise RuntimeError(f"no free port <= {MAX_HTTP_PORT} found in {attempts} attempts")


# libc's ``prctl``, loaded here: a ``preexec_fn`` must not import (another thread of a launching
# process can hold the import lock at fork, and the child then waits forever).
_PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl if sys.platform == "linux" else None


def die_with_parent() -> None:
    """``preexec_fn``: SIGKILL this child when its parent dies (Linux ``PR_SET_PDEATHSIG``)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux only)."""
    return _PRCTL is not None and _PRCTL(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def start_in_own_group(
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str],
    cwd: Path,
    stdin: int | IO[Any] | None = None,
    stdout: int | IO[Any] | None = None,
    text: bool = False,
) -> subprocess.Popen[Any]:
    """Start ``argv`` as a new session leader that dies with this process."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(argv),
            stdin=stdin,
            stdout=log if stdout is None else stdout,
            stderr=log if stdout is not None else subprocess.STDOUT,
            env=dict(env),
            cwd=str(cwd),
            text=text,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )


@dataclass(frozen=True)
class GroupMember:
    """One live process of a process group, as ``/proc`` shows it."""

    pid: int
    state: str  # "Z" for a zombie (exited, not yet reaped)
    cmdline: str


def group_members(pgid: int) -> list[GroupMember]:
    """Every process whose process group is ``pgid`` (read from ``/proc``, Linux)."""
    members: list[GroupMember] = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            raw_cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:  # exited while we looked
            continue
        # Fields after the command name (which may contain spaces) start at the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid:
            cmdline = raw_cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
            members.append(GroupMember(int(entry), fields[0], cmdline))
    return members


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member this user may not signal; the wait below reports it
        return True
    return True


def kill_group(
    proc: subprocess.Popen[Any], grace_s: float, reap_timeout_s: float = 30.0
) -> list[GroupMember]:
    """SIGTERM, then SIGKILL, the process group led by ``proc``; wait until it is gone."""
    pgid = proc.pid
    if _signal_group(pgid, signal.SIGTERM):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
        _signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    deadline = time.monotonic() + reap_timeout_s
    while True:
        # Collect the exit status of this process's children in the group.
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-pgid, os.WNOHANG)[0]:
                pass
        left = group_members(pgid)
        if not left or time.monotonic() > deadline:
            return left
        if any(m.state != "Z" for m in left):
            _signal_group(pgid, signal.SIGKILL)
        time.sleep(0.1)


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a log file (``<no log>`` when it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "<no log>"
    return "\n".join(text.splitlines()[-lines:])


_RANK_TAG = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?P<ranks>(?: [A-Z_]+\d+)*)\]")
LAUNCHER = "launcher"


def rank_log_lines(text: str) -> dict[str, list[str]]:
    """Log lines by rank tag (``TP0``, ``DP1 TP1``; untagged: ``launcher``); a tag mid-line (after
    a progress bar) starts a new group, the text before it staying with the rank writing it."""
    groups: dict[str, list[str]] = {}
    current = LAUNCHER
    for line in text.splitlines():
        start = 0
        for match in _RANK_TAG.finditer(line):
            if match.start() > start:
                groups.setdefault(current, []).append(line[start : match.start()])
            current = match.group("ranks").strip() or LAUNCHER
            start = match.start()
        groups.setdefault(current, []).append(line[start:])
    return groups


def format_rank_tails(text: str, lines: int = 12) -> str:
    """Each rank's last ``lines`` log lines, one block per rank."""
    blocks = [
        f"--- last {lines} lines of {rank} ---\n" + "\n".join(group[-lines:])
        for rank, group in sorted(rank_log_lines(text).items())
    ]
    return "\n".join(blocks) if blocks else "<empty log>"
