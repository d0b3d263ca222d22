"""``plan`` gives the launch's verdict on the installed release (0.5.13.post1, 0.5.23): every
refused row of the fault matrix (live in the generation suite's fault matrix: refused in the
launcher) is refused by the planner in one line with the launcher's words, and launches the
server starts are planned."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.matrices.plan_verdicts import (
    REFUSED_ON_RANKS,
    STARTS,
    assert_planned,
    assert_refused_like_the_launcher,
    assert_refused_on_ranks,
)
from harness.matrices.refused_launches import REFUSED


@pytest.mark.parametrize("row", sorted(REFUSED))
def test_the_planner_refuses_what_the_launcher_refuses(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, row: str
) -> None:
    assert_refused_like_the_launcher(capsys, row, tmp_path)


@pytest.mark.parametrize("row", sorted(REFUSED_ON_RANKS))
def test_the_planner_refuses_what_the_ranks_refuse(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, row: str
) -> None:
    assert_refused_on_ranks(capsys, row, tmp_path)


@pytest.mark.parametrize("row", sorted(STARTS))
def test_the_planner_plans_what_the_server_starts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, row: str
) -> None:
    assert_planned(capsys, row, tmp_path)
