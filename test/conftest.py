"""Makes ``test/harness`` importable as ``harness`` for every test directory, and keeps the
``slow`` set out of the default run.

``test/`` itself is not a package (pytest's rootdir-relative test ids stay short).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_TEST_DIR = str(Path(__file__).resolve().parent)
if _TEST_DIR not in sys.path:
    sys.path.insert(0, _TEST_DIR)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``slow`` tests run only with ``SPECINIT_TEST_SLOW=1`` (:mod:`harness.selection`):
    launches that repeat what a CI test already launches with one flag changed, stock contrasts
    beyond EAGLE3's, and the full fault and recipe matrices."""
    from harness.selection import slow_enabled, slow_skip_reason

    if slow_enabled():
        return
    skip = pytest.mark.skip(reason=slow_skip_reason())
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
