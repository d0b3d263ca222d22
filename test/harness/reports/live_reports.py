"""Keep the plugin's live memory reports of a test run in one folder, for CI's report artifact."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

KEEP_ENV = "SPECINIT_TEST_KEEP_LIVE_REPORTS"
PLUGIN_REPORT_DIR_ENV = "SGLANG_SPECINIT_REPORT_DIR"
LIVE_FILE_GLOB = "memory-rank*.json"


def keep_live_reports(launch_env: Mapping[str, str], fallback_label: str) -> Path | None:
    """Copy the launch's ``memory-rank*.json`` into the keep folder; returns the copy's folder."""
    root = os.environ.get(KEEP_ENV)
    source = launch_env.get(PLUGIN_REPORT_DIR_ENV)
    if not root or not source:
        return None
    files = sorted(Path(source).glob(LIVE_FILE_GLOB))
    if not files:
        return None
    # The running test's id (``PYTEST_CURRENT_TEST`` without its phase and directories).
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    test_id = (current.rsplit(" ", 1)[0] if current else fallback_label).split("/")[-1]
    base = Path(root) / (re.sub(r"[^A-Za-z0-9_.=-]+", "_", test_id).strip("_") or "launch")
    target, n = base, 1
    while target.exists():
        n += 1
        target = base.with_name(f"{base.name}-{n}")
    target.mkdir(parents=True)
    for path in files:
        shutil.copy2(path, target / path.name)
    return target
