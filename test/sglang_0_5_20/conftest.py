"""Tests on the real sglang 0.5.20 (``.venv-sglang0520``), 0.5.16 - 0.5.19 (their wheels unpacked
first on ``PYTHONPATH`` over this venv: ``scripts/sibling_release.sh``): the ``sglang_0_5_23``
adapter serves the five, the ``ParallelState`` generation (every difference:
``sglang_0_5_23/release_shims.py``; 0.5.16 - 0.5.18 keep 0.5.15's dataclass ``ServerArgs``, and
0.5.16 has no published configuration bags).

Collected only when the interpreter's sglang is one of them (CI runs 0.5.16's - 0.5.19's
signature and planner files only, ``scripts/test.sh``; their Engine launch by hand: ``bash
scripts/sibling_release.sh 0.5.18 .venv-sglang0520 test/sglang_0_5_20/test_eagle3_launch.py``;
``test_server_args_stock.py`` probes 0.5.19+'s resolution, not 0.5.16 - 0.5.18's). As on 0.5.23,
SGLang imports its CPU ops from ``sgl_kernel`` at module import
(:mod:`harness.launch.sglang_release`: the test double); the one Engine these tests read is
started once per session by :mod:`harness.launch.launch_0_5_23`.
"""

from __future__ import annotations

import sys
from pathlib import Path

_TEST_DIR = str(Path(__file__).resolve().parents[1])
if _TEST_DIR not in sys.path:
    sys.path.insert(0, _TEST_DIR)

from harness.launch.release_suite import eagle3_launch_fixture, release_gate  # noqa: E402

RELEASES = {(0, 5, 16), (0, 5, 17), (0, 5, 18), (0, 5, 19), (0, 5, 20)}

collect_ignore_glob = release_gate(RELEASES)

eagle3_on = eagle3_launch_fixture("EAGLE3", "eagle3_on")
