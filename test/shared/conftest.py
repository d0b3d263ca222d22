"""Checks every generation suite makes the same way, run on the releases whose row in
:mod:`harness.releases` says ``shared`` (0.5.13.post1 in ``.venv``, 0.5.23 in
``.venv-sglang0523``), with that row's expectations. On any other release nothing here is
collected.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.matrices.plan_verdicts import VERDICT_PROPERTY
from harness.releases import suite_gate

collect_ignore_glob, ROW = suite_gate(Path(__file__).parent)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One table of every launch run both live and through ``plan``: the two verdicts."""
    rows = [
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "call"
        for key, value in getattr(report, "user_properties", ())
        if key == VERDICT_PROPERTY
    ]
    if not rows:
        return
    width = max(len(launch) for launch, _, _ in rows)
    terminalreporter.write_sep("-", f"plan vs live launch, sglang {ROW.name if ROW else '?'}")
    terminalreporter.write_line(f"{'launch':<{width}}  planner  live     same")
    for launch, planned, live in sorted(rows):
        same = "yes" if planned == live else "NO"
        terminalreporter.write_line(f"{launch:<{width}}  {planned:<7}  {live:<7}  {same}")
