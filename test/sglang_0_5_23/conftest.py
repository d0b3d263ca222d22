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

from harness.launch.sglang_release import sglang_release  # noqa: E402

if sglang_release()[:3] != (0, 5, 23):
    collect_ignore_glob = ["test_*.py"]

from harness.launch.launch_0_5_23 import launch, prefetch  # noqa: E402
from harness.launch.sglang_release import SGL_KERNEL_STUB_DIR  # noqa: E402

# Tests that import SGLang in this process: 0.5.23 decides is_cpu() at import time and then
# imports CPU ops from sgl_kernel (the named test double; Engines get both from cpu_env).
if sglang_release()[:3] == (0, 5, 23):
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    if str(SGL_KERNEL_STUB_DIR) not in sys.path:
        sys.path.append(str(SGL_KERNEL_STUB_DIR))


@pytest.fixture(scope="session")
def engine_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``engine_runs(kind, plugin)``: the session's launch for that pair.

    Every launch the selected tests will read (``LAUNCHES`` of each test, see
    :func:`launches_of`) is started up front, two at a time, in the order the tests need them.
    """
    root = tmp_path_factory.mktemp("sglang0523")
    wanted: list[tuple[str, bool]] = []
    for item in request.session.items:
        for key in launches_of(item):
            if key not in wanted:
                wanted.append(key)
    prefetch(wanted, root)
    return lambda kind, plugin: launch(kind, plugin, root)


def launches_of(item: pytest.Item) -> list[tuple[str, bool]]:
    """The (kind, plugin) launches a test reads: its ``launches`` marker, else none known."""
    marker = item.get_closest_marker("launches")
    if marker is None or item.get_closest_marker("skip") is not None:
        return []
    keys = list(marker.args)
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "kind" in callspec.params:
        # A test parametrized by draft kind reads that kind's launches ("{kind}" in the marker).
        keys = [(callspec.params["kind"], k[1]) if k[0] == "{kind}" else k for k in keys]
    return keys
