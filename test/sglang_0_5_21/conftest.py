"""Tests on the real sglang 0.5.21 (``.venv-sglang0521``): the ``sglang_0_5_23`` adapter serves
0.5.21, the same internal API generation (what differs: ``sglang_0_5_23/release_shims.py``).

Collected only when the interpreter's sglang is 0.5.21. The CPU recipe is 0.5.23's
(:mod:`harness.launch.sglang_release`: same graph switches, the ``sgl_kernel`` test double); the one
Engine these tests read is started once per session by :mod:`harness.launch.launch_0_5_23`.
"""

from __future__ import annotations

import sys
from pathlib import Path

_TEST_DIR = str(Path(__file__).resolve().parents[1])
if _TEST_DIR not in sys.path:
    sys.path.insert(0, _TEST_DIR)

from harness.launch.release_suite import eagle3_launch_fixture, release_gate  # noqa: E402

RELEASE = (0, 5, 21)

collect_ignore_glob = release_gate({RELEASE})

eagle3_on = eagle3_launch_fixture("EAGLE3", "eagle3_on")
