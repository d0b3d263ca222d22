"""Phases of one Engine start-up, read from its log and ``/proc`` (no timers inside SGLang).

The launch runs with SGLang's ``SGLANG_LOG_MS=1``, which makes every process that called
SGLang's ``configure_logger`` stamp its lines to the millisecond; the harness's engine driver
stamps its own lines the same way (``harness.launch.engine_driver``), which covers the
launcher's ``load_plugins()`` before SGLang configures logging. The start of the driver and
scheduler processes comes from ``/proc/<pid>/stat`` (10 ms ticks). Each marker is the first log
line, at or after the previous marker, that SGLang (or our plugin, or the driver) writes at that
point of the start-up; a phase is the time between two consecutive markers.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

# "[2026-12-01 19:40:08.710 TP0] message" (the prefix after the time is optional).
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})[^\]]*\] (.*)$")

# The environment that turns the stamps on (SGLang's own switch).
STAMP_ENV = {"SGLANG_LOG_MS": "1"}


@dataclass(frozen=True)
class Marker:
    """A point of the start-up: a process start (``pid_key``) or a log line (``pattern``)."""

    name: str
    pattern: str | None = None
    pid_key: str | None = None
    # The last matching line before the next marker's line, instead of the first one.
    last: bool = False


# In start-up order. The phase ending at a marker is named after what runs before it.
MARKERS: tuple[Marker, ...] = (
    Marker("driver process start", pid_key="driver"),
    Marker("driver: python + import sglang", r"calling sglang\.Engine"),
    Marker("launcher: import Engine module", r"Available plugins for group"),
    Marker(
        "launcher: load_plugins() + ServerArgs", r"sglang\.srt\.entrypoints\.engine:server_args="
    ),
    Marker("launcher: logger, resolve, check_server_args, ports", r"^server_args="),
    Marker("launcher -> scheduler process start", pid_key="scheduler"),
    Marker("scheduler: imports, load_plugins(), Scheduler setup", r"Init parallel begin"),
    Marker("scheduler: parallel init, target runner setup", r"Load weight begin"),
    Marker("target weights loaded", r"Load weight end"),
    Marker("draft worker setup + draft weights", r"Load weight end", last=True),
    Marker("pool sizing (profile; plugin: pricing)", r"KV Cache is allocated"),
    Marker("pools allocated", r"Memory pool end", last=True),
    Marker("attention backends, caches -> scheduler ready", r"Engine startup timings"),
    Marker("scheduler ready -> Engine ready", pid_key="ready"),
)

PHASES: tuple[str, ...] = tuple(m.name for m in MARKERS[1:])


def _boot_epoch() -> float:
    """Wall-clock time of boot, from ``/proc/uptime`` (10 ms resolution)."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - uptime


def process_start_epoch(pid: int) -> float | None:
    """Wall-clock start of a live process (``/proc/<pid>/stat`` field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
    return _boot_epoch() + ticks / os.sysconf("SC_CLK_TCK")


def stamped_lines(log: str) -> list[tuple[float, str]]:
    """(epoch seconds, message) of every millisecond-stamped line of ``log``, in order."""
    out = []
    for line in log.splitlines():
        m = _STAMP.match(line)
        if m:
            when = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
            out.append((when, m.group(2)))
    return out


def _matches(lines: list[tuple[float, str]], marker: Marker, start: int, stop: int) -> list[int]:
    pattern = re.compile(marker.pattern or "")
    return [j for j in range(start, stop) if pattern.search(lines[j][1])]


def marker_times(log: str, events: dict[str, float]) -> dict[str, float]:
    """Epoch of each marker found: ``events`` gives the ``pid_key`` ones (process starts, ready).

    A log marker is searched from the previous log marker's line on, so repeated messages
    ("Load weight end") are told apart by position; a missing one (e.g. no draft) is skipped.
    """
    lines = stamped_lines(log)
    found: dict[str, float] = {}
    pos = 0
    log_markers = [m for m in MARKERS if m.pattern]
    for marker in MARKERS:
        if marker.pid_key:
            if marker.pid_key in events:
                found[marker.name] = events[marker.pid_key]
            continue
        hits = _matches(lines, marker, pos, len(lines))
        if not hits:
            continue
        j = hits[0]
        if marker.last:
            # The last repeat before the next log marker's line.
            after = log_markers[log_markers.index(marker) + 1 :]
            ahead = _matches(lines, after[0], j + 1, len(lines)) if after else []
            j = _matches(lines, marker, j, ahead[0] if ahead else len(lines))[-1]
        found[marker.name] = lines[j][0]
        pos = j + 1
    return found


def phases(log: str, events: dict[str, float]) -> dict[str, float]:
    """Seconds of each phase whose two ends were found (keyed by :data:`PHASES`)."""
    at = marker_times(log, events)
    out: dict[str, float] = {}
    previous: float | None = at.get(MARKERS[0].name)
    for marker in MARKERS[1:]:
        if marker.name in at:
            if previous is not None:
                out[marker.name] = at[marker.name] - previous
            previous = at[marker.name]
        else:
            previous = None
    return out
