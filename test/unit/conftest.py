"""What the test/unit modules share: the command line run in this process."""

from __future__ import annotations

import os
from collections.abc import Callable
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
