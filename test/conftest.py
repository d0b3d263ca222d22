"""``test/harness`` importable as ``harness`` everywhere, the ``slow`` set out of the default run,
the 0.5.23 launches (``engine_runs``), the run's plan-vs-live verdict table, and the session as
the reaper of its launches' orphans."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_TEST_DIR = str(Path(__file__).resolve().parent)
if _TEST_DIR not in sys.path:
    sys.path.insert(0, _TEST_DIR)


def pytest_configure(config: pytest.Config) -> None:
    """Orphans of a killed launch become this process's children, so ``kill_group`` reaps them
    at once instead of waiting for PID 1 (about 1.5 s a launch on the CI machine)."""
    from harness.launch.processes import become_subreaper

    become_subreaper()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``slow`` tests and the installed row's ``slow`` files run only with SPECINIT_TEST_SLOW=1."""
    from harness.releases import SLOW_ENV, installed_row

    if os.environ.get(SLOW_ENV) == "1":
        return
    row = installed_row()
    skip = pytest.mark.skip(reason=f"in the slow set: set {SLOW_ENV}=1 to run it")
    for item in items:
        if "slow" in item.keywords or (row and row.slow_file(item.path)):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def plan_every_started_launch(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, ``plan`` on every launch it brought up with the plugin on: the planner
    must plan it (a launch that started is never refused), and the pair joins the table."""
    yield
    engine = sys.modules.get("harness.launch.engine")
    if engine is None or not engine._started:
        return  # nothing launched since the last test
    from harness.matrices.plan_verdicts import VERDICT_PROPERTY, plan_started_launches

    for label, planned in plan_started_launches():
        verdict = (label, planned.verdict(), "starts")
        request.node.user_properties.append((VERDICT_PROPERTY, verdict))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One table of every launch the run started live and also put through ``plan``."""
    from harness.matrices.plan_verdicts import VERDICT_PROPERTY
    from harness.releases import installed_row

    rows = sorted(
        {
            # A list after xdist's round trip; in every phase's report once appended.
            tuple(value)
            for reports in terminalreporter.stats.values()
            for report in reports
            for key, value in getattr(report, "user_properties", ())
            if key == VERDICT_PROPERTY
        }
    )
    if not rows:
        return
    row = installed_row()
    width = max(len(launch) for launch, _, _ in rows)
    terminalreporter.write_sep("-", f"plan vs live launch, sglang {row.name if row else '?'}")
    terminalreporter.write_line(f"{'launch':<{width}}  planner  live     same")
    for launch, planned, live in rows:
        same = "yes" if planned == live else "NO"
        terminalreporter.write_line(f"{launch:<{width}}  {planned:<7}  {live:<7}  {same}")
    same = sum(planned == live for _, planned, live in rows)
    terminalreporter.write_line(f"{len(rows)} launches, the same verdict in {same}")


@pytest.fixture(scope="module")
def engine_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``engine_runs(kind, plugin)``: that launch, started once per process, two at a time. Up
    front go the launches of every collected test, or, in an xdist worker, this file's."""
    from harness.launch.launch_0_5_23 import launch, prefetch

    root = tmp_path_factory.getbasetemp() / "sglang0523"
    root.mkdir(exist_ok=True)
    in_worker = "PYTEST_XDIST_WORKER" in os.environ
    wanted: dict[tuple[str, bool], None] = {}  # in first-asked order, once each
    for item in request.session.items:
        marker = item.get_closest_marker("launches")  # the (kind, plugin) launches it reads
        skipped = item.get_closest_marker("skip") is not None
        if marker is None or skipped or (in_worker and item.module is not request.module):
            continue
        # A test parametrized by draft kind reads that kind's launches ("{kind}" in the marker).
        params = getattr(getattr(item, "callspec", None), "params", {})
        for key in marker.args:
            if key[0] == "{kind}" and "kind" in params:
                key = (params["kind"], key[1])
            wanted[key] = None
    prefetch(list(wanted), root)
    return lambda kind, plugin: launch(kind, plugin, root)


@pytest.fixture(scope="module")
def eagle3_on(engine_runs: Any) -> Any:
    """The tiny EAGLE3 pair's plugin-on launch."""
    return engine_runs("EAGLE3", True)
