"""``plan`` gives the launch's verdict on the installed release (0.5.13.post1, 0.5.23): every
refused row of the fault matrix (live in test_refused_launches: refused in the launcher) is
refused by the planner in one line with the launcher's words, and launches the server starts
(live here, odd ones included) are planned."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.launch.engine import cpu_server
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S
from harness.matrices.plan_verdicts import (
    REFUSED_ON_RANKS,
    STARTS,
    VERDICT_PROPERTY,
    assert_planned,
    assert_planned_like_started,
    assert_refused_like_the_launcher,
    assert_refused_on_ranks,
    launch_flags,
    plan_verdict,
    rows_of_this_generation,
    started_launches,
)
from harness.matrices.refused_launches import (
    ALGORITHM,
    REFUSED,
    REFUSED_BY_SGLANG,
    SPEC_FLAGS,
    intact_draft,
)


@pytest.mark.parametrize("row", sorted(REFUSED))
def test_the_planner_refuses_what_the_launcher_refuses(tmp_path: Path, row: str) -> None:
    assert_refused_like_the_launcher(row, tmp_path)


@pytest.mark.parametrize("row", sorted(REFUSED_ON_RANKS))
def test_the_planner_refuses_what_the_ranks_refuse(tmp_path: Path, row: str) -> None:
    assert_refused_on_ranks(row, tmp_path)


@pytest.mark.parametrize("row", rows_of_this_generation(REFUSED_BY_SGLANG))
def test_the_planner_refuses_what_sglang_refuses(tmp_path: Path, row: str) -> None:
    """The planner's half of test_refused_launches' live rows, for the rows CI does not launch."""
    spec = REFUSED_BY_SGLANG[row]
    draft = spec.make_draft(tmp_path)
    target = spec.make_target(tmp_path)
    flags = launch_flags(draft, target=target, algorithm=spec.algorithm, **spec.flags)
    assert spec.planned in plan_verdict(flags).refusal_line()


@pytest.mark.parametrize("row", rows_of_this_generation(STARTS))
def test_the_planner_plans_what_the_server_starts(tmp_path: Path, row: str) -> None:
    assert_planned(row, tmp_path)


@pytest.mark.cpu_engine
@pytest.mark.timeout(ENGINE_TIMEOUT_S * 2)
@pytest.mark.parametrize(
    "row",
    [
        pytest.param(name, marks=() if STARTS[name].in_ci else pytest.mark.slow)
        for name in rows_of_this_generation(STARTS)
    ],
)
def test_the_server_starts_what_the_planner_plans(
    tmp_path: Path, request: pytest.FixtureRequest, row: str
) -> None:
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
    (launch,) = started_launches()  # this launch, with the flags plan is given
    planned = assert_planned_like_started(launch)
    request.node.user_properties.append((VERDICT_PROPERTY, (row, planned.verdict(), "starts")))
