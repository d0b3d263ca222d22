"""The ``sglang_0_5_23`` generation suite: the releases whose row in :mod:`harness.releases`
names that adapter (0.5.16 - 0.5.23), each running the files its row lists, with its row's
expectations (``scripts/test.sh``: one line per release, its venv or its wheel over the
generation's venv)."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.launch.release_suite import (
    eagle3_launch_fixture,
    prefetch_launch_fixtures,  # noqa: F401  (an autouse fixture: starts the launches up front)
)
from harness.releases import mark_slow_files, suite_gate

# Tests that import SGLang in this process get the CPU engine and the sgl_kernel test double
# (Engines get both from cpu_env).
collect_ignore_glob, ROW = suite_gate(Path(__file__).parent)

eagle3_on = eagle3_launch_fixture("EAGLE3", "eagle3_on")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_slow_files(items, ROW)
