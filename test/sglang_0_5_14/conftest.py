"""The ``sglang_0_5_14`` generation suite: the releases whose row in :mod:`harness.releases`
names that adapter (0.5.14, 0.5.15, 0.5.15.post1's wheel over 0.5.15's venv), each running the
files its row lists."""

from __future__ import annotations

import sys
from pathlib import Path

_TEST_DIR = str(Path(__file__).resolve().parents[1])
if _TEST_DIR not in sys.path:
    sys.path.insert(0, _TEST_DIR)

from harness.launch.release_suite import eagle3_launch_fixture  # noqa: E402
from harness.releases import suite_gate  # noqa: E402

collect_ignore_glob, ROW = suite_gate(Path(__file__).parent)

eagle3_on = eagle3_launch_fixture("EAGLE3", "eagle3_on")
eagle3_off = eagle3_launch_fixture("EAGLE3", "eagle3_off", plugin=False)
eagle3_nnpl0_on = eagle3_launch_fixture("EAGLE3-nnpl0", "eagle3_nnpl0_on")
eagle3_nnpl0_off = eagle3_launch_fixture("EAGLE3-nnpl0", "eagle3_nnpl0_off", plugin=False)
eagle3_nnpl1_on = eagle3_launch_fixture("EAGLE3-nnpl1", "eagle3_nnpl1_on")
eagle3_nnpl1_off = eagle3_launch_fixture("EAGLE3-nnpl1", "eagle3_nnpl1_off", plugin=False)
