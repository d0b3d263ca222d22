"""Tests on the real sglang 0.5.23 (run by ``scripts/test.sh`` with ``.venv-sglang0523``).

Collected only when the interpreter's sglang is 0.5.23; the main run (``.venv``, sglang
0.5.13.post1) skips this directory. Each launch (one ``sglang.Engine`` on device cpu with the
CPU harness, plugin on or off) runs once per session and is shared by every test that reads
it: an Engine takes ~50 s on an idle 2-core machine.
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

from harness.sglang_release import sglang_release  # noqa: E402

if sglang_release()[:3] != (0, 5, 23):
    collect_ignore_glob = ["test_*.py"]

from harness.launch_0_5_23 import launch  # noqa: E402
from harness.sglang_release import SGL_KERNEL_STUB_DIR  # noqa: E402

# Tests that import SGLang in this process: 0.5.23 decides is_cpu() at import time and then
# imports CPU ops from sgl_kernel (the named test double; Engines get both from cpu_env).
if sglang_release()[:3] == (0, 5, 23):
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    if str(SGL_KERNEL_STUB_DIR) not in sys.path:
        sys.path.append(str(SGL_KERNEL_STUB_DIR))


@pytest.fixture(scope="session")
def engine_runs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("sglang0523")
    return lambda kind, plugin: launch(kind, plugin, root)
