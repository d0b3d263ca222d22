"""Tests on the real sglang 0.5.20 (``.venv-sglang0520``): the ``sglang_0_5_23`` adapter serves
0.5.20, the ``ParallelState`` generation (every difference: ``sglang_0_5_23/release_shims.py``).

Collected only when the interpreter's sglang is 0.5.20, or 0.5.19 (the sibling wheel with the
same internal APIs, run over this venv with the unpacked wheel first on ``PYTHONPATH``: only
the signature checks, ``test_adapter_signatures.py``). As on 0.5.23, SGLang imports its CPU ops
from ``sgl_kernel`` at module import (:mod:`harness.launch.sglang_release`: the test double); the
one Engine these tests read is started once per session by :mod:`harness.launch.launch_0_5_23`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

_TEST_DIR = str(Path(__file__).resolve().parents[1])
if _TEST_DIR not in sys.path:
    sys.path.insert(0, _TEST_DIR)

from harness.launch.sglang_release import SGL_KERNEL_STUB_DIR, sglang_release  # noqa: E402

RELEASE = (0, 5, 20)
# Releases of the generation whose wheels only the signature checks run on.
SIGNATURE_ONLY = {(0, 5, 19)}

if sglang_release()[:3] == RELEASE:
    collect_ignore_glob: list[str] = []
elif sglang_release()[:3] in SIGNATURE_ONLY:
    collect_ignore_glob = ["test_eagle3_launch.py", "test_server_args_stock.py"]
else:
    collect_ignore_glob = ["test_*.py"]
if not collect_ignore_glob or collect_ignore_glob[0] != "test_*.py":
    # Tests that import SGLang in this process: is_cpu() is decided at import and CPU ops come
    # from sgl_kernel (the named test double; Engines get both from cpu_env).
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    if str(SGL_KERNEL_STUB_DIR) not in sys.path:
        sys.path.append(str(SGL_KERNEL_STUB_DIR))


@pytest.fixture(scope="session")
def eagle3_on(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tiny EAGLE3 pair on 0.5.20, plugin on (:data:`harness.launch.launch_0_5_23.KINDS`)."""
    from harness.launch.launch_0_5_23 import launch

    return launch("EAGLE3", True, tmp_path_factory.mktemp("sglang0520"))
