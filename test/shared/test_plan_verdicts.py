"""``plan`` gives the launch's verdict: the fault matrix's refused rows (live in
test_refused_launches) are refused in one line, and launches the server starts are planned."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.launch.engine import cpu_server
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S
from harness.matrices.plan_verdicts import (
    ALGORITHM,
    SPEC_FLAGS,
    STARTS,
    TABLES,
    assert_refusal,
    intact_draft,
    launch_verdict,
    rows_of_this_generation,
)


@pytest.mark.parametrize(
    ("table", "row"),
    [
        pytest.param(table, name, id=f"{table}-{name}")
        for table, rows in TABLES.items()
        for name in rows_of_this_generation(rows)
    ],
)
def test_the_planner_gives_the_launch_verdict(tmp_path: Path, table: str, row: str) -> None:
    spec = TABLES[table][row]
    draft, target = spec.make_draft(tmp_path), spec.make_target(tmp_path)
    planned = launch_verdict(spec, draft, target)
    if spec.expect:
        assert_refusal(planned, spec.expect, draft)
    else:
        planned.assert_plans()


@pytest.mark.cpu_engine
@pytest.mark.timeout(ENGINE_TIMEOUT_S * 2)
@pytest.mark.parametrize(
    "row",
    [
        pytest.param(name, marks=() if STARTS[name].in_ci else pytest.mark.slow)
        for name in rows_of_this_generation(STARTS)
    ],
)
def test_the_server_starts_what_the_planner_plans(tmp_path: Path, row: str) -> None:
    """The launch starts; test/conftest.py's plan_every_started_launch then plans it."""
    spec = STARTS[row]
    with cpu_server(
        spec.make_target(tmp_path),
        draft_model_path=intact_draft(tmp_path),
        algorithm=ALGORITHM,
        plugin=True,
        work_dir=tmp_path / "run",
        startup_timeout_s=ENGINE_TIMEOUT_S,
        **{**SPEC_FLAGS, **spec.flags},
    ) as server:
        assert server.healthy()
