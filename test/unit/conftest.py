"""What the test/unit modules share: the command line run in this process, and one plan per
shipped example."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
from harness import planner_cli
from harness.planner_cli import Verdict, run_cli

os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.fixture(scope="session")
def cli() -> Callable[..., Verdict]:
    """``cli(*argv)``: ``sglang-specinit *argv`` in this process: (exit code, stdout, stderr)."""
    return lambda *argv: run_cli(list(argv))


@pytest.fixture(scope="session")
def plan_json() -> Callable[..., dict[str, Any]]:
    """``plan_json(*argv)``: ``plan --json *argv``, which must exit 0, read."""
    return planner_cli.plan_json


@pytest.fixture(scope="session")
def planned() -> Callable[[str], tuple[dict[str, Any], str]]:
    """``planned(example)``: its ``plan --json`` and text, from one plan (a second in-process plan
    may add a note); skipped where the installed release refuses the example."""
    from sglang_specinit.planner.cli import _plan, _planner_parser
    from sglang_specinit.planner.columns import plan_json, plan_text
    from sglang_specinit.planner.releases import installed_replay
    from sglang_specinit.planner.shipped_examples import example_refusal

    @cache
    def plan(example: str) -> tuple[dict[str, Any], str]:
        options, launch = _planner_parser().parse_known_args(["--example", example])
        built = _plan(options, launch)
        return json.loads(json.dumps(plan_json(built))), plan_text(built)

    def run(example: str) -> tuple[dict[str, Any], str]:
        refusal = example_refusal(example, installed_replay())
        if refusal is not None:
            pytest.skip(f"{example} is refused here: {refusal}")
        return plan(example)

    return run
