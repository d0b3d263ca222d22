"""The ``sglang_0_5_14`` generation suite (0.5.14 - 0.5.15.post1): the files each row lists."""

from __future__ import annotations

from pathlib import Path

from harness.launch.release_suite import (
    eagle3_launch_fixture,
    prefetch_launch_fixtures,  # noqa: F401  (an autouse fixture: starts the launches up front)
)
from harness.releases import suite_gate

collect_ignore_glob, ROW = suite_gate(Path(__file__).parent)

eagle3_on = eagle3_launch_fixture("EAGLE3", "eagle3_on")
eagle3_off = eagle3_launch_fixture("EAGLE3", "eagle3_off", plugin=False)
eagle3_nnpl0_on = eagle3_launch_fixture("EAGLE3-nnpl0", "eagle3_nnpl0_on")
eagle3_nnpl0_off = eagle3_launch_fixture("EAGLE3-nnpl0", "eagle3_nnpl0_off", plugin=False)
eagle3_nnpl1_on = eagle3_launch_fixture("EAGLE3-nnpl1", "eagle3_nnpl1_on")
eagle3_nnpl1_off = eagle3_launch_fixture("EAGLE3-nnpl1", "eagle3_nnpl1_off", plugin=False)
