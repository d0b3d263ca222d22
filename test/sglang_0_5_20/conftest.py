"""Tests on the real sglang 0.5.20 (``.venv-sglang0520``): the ``sglang_0_5_23`` adapter serves
0.5.20, the ``ParallelState`` generation (every difference: ``sglang_0_5_23/release_shims.py``).

Collected only when the interpreter's sglang is 0.5.20, or 0.5.19 (the sibling wheel with the
same internal APIs, run over this venv with the unpacked wheel first on ``PYTHONPATH``: only
the signature checks, ``test_adapter_signatures.py``). As on 0.5.23, SGLang imports its CPU ops
from ``sgl_kernel`` at module import (:mod:`harness.launch.sglang_release`: the test double); the
one Engine these tests read is started once per session by :mod:`harness.launch.launch_0_5_23`.
"""

from __future__ import annotations

import sys
from pathlib import Path

_TEST_DIR = str(Path(__file__).resolve().parents[1])
if _TEST_DIR not in sys.path:
    sys.path.insert(0, _TEST_DIR)

from harness.launch.release_suite import eagle3_launch_fixture, release_gate  # noqa: E402

RELEASE = (0, 5, 20)
# Releases of the generation whose wheels only the signature checks run on.
SIGNATURE_ONLY = {(0, 5, 19)}

collect_ignore_glob = release_gate(
    {RELEASE}, SIGNATURE_ONLY, ["test_eagle3_launch.py", "test_server_args_stock.py"]
)

eagle3_on = eagle3_launch_fixture("EAGLE3", "eagle3_on")
