"""The launches that came up in this test process with the plugin on and no fault double: the
live side of the plan-vs-live verdict table (``harness.matrices.plan_verdicts``)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from harness.cpu_doubles import faults, shims
from harness.launch.server_process import PLUGIN_ENTRY_POINT

# Switches of test doubles that change what a launch does beyond its flags (such a launch is not
# one an operator types), and SGLang's opt-in to pipeline stages with a draft, which ``plan``
# refuses whatever the environment says (issue #30): the planner is not held to these.
UNPLANNED_ENV = (
    faults.FAIL_DRAFT_RANK_ENV,
    faults.PAUSE_DRAFT_POOL_ENV,
    shims.PER_DEVICE_CAPACITY_ENV,
    "SGLANG_ENABLE_PP_SPEC",
)

_started: list[tuple[dict[str, Any], int]] = []
_seen: set[str] = set()
_lock = threading.Lock()


def note_started(kwargs: Mapping[str, Any], env: Mapping[str, str], capacity_bytes: int) -> None:
    """Called by the launch helpers once a launch is up (each distinct launch kept once)."""
    if env.get("SGLANG_PLUGINS") != PLUGIN_ENTRY_POINT or any(k in env for k in UNPLANNED_ENV):
        return
    key = repr((sorted(kwargs.items()), capacity_bytes))
    with _lock:
        if key not in _seen:
            _seen.add(key)
            _started.append((dict(kwargs), capacity_bytes))


def drain_started() -> list[tuple[dict[str, Any], int]]:
    """The launches noted since the last call: (ServerArgs kwargs, device capacity)."""
    with _lock:
        started = list(_started)
        _started.clear()
    return started
