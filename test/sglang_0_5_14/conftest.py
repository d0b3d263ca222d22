"""Tests on the real sglang 0.5.14 (``.venv-sglang0514``) and 0.5.15 (``.venv-sglang0515``; also
0.5.15.post1's wheel over it: ``scripts/sibling_release.sh``): the ``sglang_0_5_14`` adapter,
upstream's first phased-init generation.

Collected only when the interpreter's sglang is 0.5.14 or 0.5.15 (any post release). The CPU
recipe is 0.5.13's kind (:mod:`harness.launch.sglang_release`: 0.5.14's graph switches; no
``sgl_kernel`` test double, these releases import no CPU op from it; the gate and the fixtures:
:mod:`harness.launch.release_suite`); the Engines these tests read are started once per session
by :mod:`harness.launch.launch_0_5_23` (its tiny EAGLE3 pairs are release-independent).
"""

from __future__ import annotations

import sys
from pathlib import Path

_TEST_DIR = str(Path(__file__).resolve().parents[1])
if _TEST_DIR not in sys.path:
    sys.path.insert(0, _TEST_DIR)

from harness.launch.release_suite import eagle3_launch_fixture, release_gate  # noqa: E402

RELEASES = ((0, 5, 14), (0, 5, 15))

collect_ignore_glob = release_gate(RELEASES)

eagle3_on = eagle3_launch_fixture("EAGLE3", "eagle3_on")
eagle3_off = eagle3_launch_fixture("EAGLE3", "eagle3_off", plugin=False)
eagle3_nnpl0_on = eagle3_launch_fixture("EAGLE3-nnpl0", "eagle3_nnpl0_on")
eagle3_nnpl0_off = eagle3_launch_fixture("EAGLE3-nnpl0", "eagle3_nnpl0_off", plugin=False)
eagle3_nnpl1_on = eagle3_launch_fixture("EAGLE3-nnpl1", "eagle3_nnpl1_on")
eagle3_nnpl1_off = eagle3_launch_fixture("EAGLE3-nnpl1", "eagle3_nnpl1_off", plugin=False)
