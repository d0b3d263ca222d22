"""What the test/unit modules share: the command line run in this process, and one plan per
shipped example."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"


def _cli(*argv: str) -> tuple[int, str, str]:
    from sglang_specinit.planner.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _plan_json(*argv: str) -> dict[str, Any]:
    code, out, err = _cli("plan", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@cache
def _planned(example: str) -> tuple[dict[str, Any], str]:
    from sglang_specinit.planner.cli import _plan, _planner_parser
    from sglang_specinit.planner.columns import plan_json, plan_text

    options, launch = _planner_parser().parse_known_args(["--example", example])
    plan = _plan(options, launch)
    return json.loads(json.dumps(plan_json(plan))), plan_text(plan)


def _planned_or_skip(example: str) -> tuple[dict[str, Any], str]:
    from sglang_specinit.planner.releases import installed_replay
    from sglang_specinit.planner.shipped_examples import example_refusal

    # test_plan_cli's BAD_INPUTS["refused example"]: plan refuses it in one line.
    refusal = example_refusal(example, installed_replay())
    if refusal is not None:
        pytest.skip(f"{example} is refused here: {refusal}")
    return _planned(example)


@pytest.fixture(scope="session")
def cli() -> Callable[..., tuple[int, str, str]]:
    """``cli(*argv)``: ``sglang-specinit *argv`` in this process: (exit code, stdout, stderr)."""
    return _cli


@pytest.fixture(scope="session")
def plan_json() -> Callable[..., dict[str, Any]]:
    """``plan_json(*argv)``: ``plan *argv --json``, which must exit 0, read."""
    return _plan_json


@pytest.fixture(scope="session")
def planned() -> Callable[[str], tuple[dict[str, Any], str]]:
    """``planned(example)``: its ``plan --json`` and text output, rendered from one plan (a
    second in-process plan of the example may add a note the first has not: the 0.5.13
    replay's state); skipped where the installed release refuses the example."""
    return _planned_or_skip
