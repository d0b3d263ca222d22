"""A fresh interpreter (the plugin registers once per process) that runs ``load_plugins()`` and
prints one :data:`MARK` + JSON line of what it saw, for the tests of the real entry point."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
MARK = "SPECINIT_PROBE "

# Prepended to every probe: the records its summary reports (logger, level, message).
LOG_COLLECTOR = """
import logging

records = []

class _Collect(logging.Handler):
    def emit(self, record):
        records.append({"logger": record.name, "level": record.levelname,
                        "message": record.getMessage()})

logging.getLogger().addHandler(_Collect())
logging.getLogger().setLevel(logging.INFO)
"""


def probe_env(**extra: str) -> dict[str, str]:
    """This env without the plugin's, the test run's, PYTHONPATH, SGLANG_PLUGINS; plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SGLANG_SPECINIT_", "SPECINIT_TEST_"))
        and k not in ("SGLANG_PLUGINS", "PYTHONPATH")
    }
    env.update(extra)
    return env


def same_packages_path() -> str:
    """``PYTHONPATH`` entries that make a probe import the ``sglang`` and ``sglang_specinit`` this
    process does (a sibling wheel, a worktree's ``python/``), not the venv's own."""
    import importlib.util

    inherited = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    kept = []
    for package in ("sglang", "sglang_specinit"):
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            continue
        root = str(Path(spec.origin).resolve().parents[1])
        if any(entry and str(Path(entry).resolve()) == root for entry in inherited):
            kept.append(root)
    return os.pathsep.join(kept)


def run_probe(
    python: str, probe: str, args: Sequence[str], env: dict[str, str], timeout_s: float
) -> dict[str, Any]:
    """Run ``LOG_COLLECTOR + probe`` with ``args`` + :data:`MARK`; the marked line's JSON."""
    proc = subprocess.run(
        [python, "-c", LOG_COLLECTOR + probe, *args, MARK],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=str(REPO_ROOT),
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    assert proc.returncode == 0 and len(lines) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[0][len(MARK) :])
