"""``report --beside VENV``: another release's stock column, computed in its own environment
(``VENV/bin/python -m sglang_specinit.planner.cli plan --json``, same flags and environment)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sglang_specinit.planner.inputs import PlanError

_CLI = ("-m", "sglang_specinit.planner.cli")
# The report input's key of the other release's stock column (a ``plan --json`` ``stock``).
BESIDE_KEY = "beside"


def _run(python: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), *_CLI, *argv], capture_output=True, text=True, env=dict(os.environ)
    )


def _last_line(text: str) -> str:
    """The one line a planner prints last (its error, without the command's prefix)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].removeprefix("sglang-specinit plan: error: ") if lines else "no output"


class Beside:
    """A second environment whose stock column a report puts beside this one's."""

    def __init__(self, venv: str) -> None:
        self.venv = venv
        self.python = Path(venv) / "bin" / "python"
        if not (self.python.is_file() and os.access(self.python, os.X_OK)):
            raise PlanError(f"--beside {venv}: no python at {self.python}")
        probe = _run(self.python, "--version")
        line = _last_line(probe.stdout if probe.returncode == 0 else probe.stderr)
        if probe.returncode != 0 or "(served by " not in line:
            raise PlanError(f"--beside {venv}: no sglang the plugin serves there ({line})")
        # "sglang-specinit V; sglang R (served by ADAPTER)"
        self.release = line.split("; sglang ", 1)[1].split(" ", 1)[0]

    def add_stock(self, data: dict[str, Any], plan_argv: list[str]) -> dict[str, Any]:
        """``data`` with the other release's stock column, or a note why it refuses."""
        out = _run(self.python, "plan", *plan_argv, "--json")
        added: dict[str, Any] = {}
        if out.returncode != 0:
            text = f"sglang {self.release} ({self.venv}): {_last_line(out.stderr)}"
            print(f"sglang-specinit report: --beside {self.venv}: {text}", file=sys.stderr)
        else:
            text = f"computed in {self.venv} by that release's own code"
            added = {BESIDE_KEY: json.loads(out.stdout)["stock"]}
        notes = [*data.get("notes", ()), {"column": BESIDE_KEY, "text": text}]
        return {**data, **added, "notes": notes}
