"""Tests on the real sglang 0.5.14 (``.venv-sglang0514``) and 0.5.15 (``.venv-sglang0515``):
the ``sglang_0_5_14`` adapter, upstream's first phased-init generation.

Collected only when the interpreter's sglang is 0.5.14 or 0.5.15. The CPU recipe is 0.5.13's
kind (:mod:`harness.launch.sglang_release`: 0.5.14's graph switches; no ``sgl_kernel`` test double,
these releases import no CPU op from it); the one Engine these tests read is started once per
session by :mod:`harness.launch.launch_0_5_23` (its tiny EAGLE3 pair is release-independent).
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

RELEASES = ((0, 5, 14), (0, 5, 15))

if sglang_release()[:3] not in RELEASES:
    collect_ignore_glob = ["test_*.py"]
else:
    # Tests that import SGLang in this process: is_cpu() is decided at import.
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")


def launch_kind(kind: str, plugin: bool, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from harness.launch.launch_0_5_23 import launch

    release = ".".join(map(str, sglang_release()))
    return launch(kind, plugin, tmp_path_factory.mktemp(f"sglang{release}"))


@pytest.fixture(scope="session")
def eagle3_on(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tiny EAGLE3 pair, plugin on (:data:`harness.launch.launch_0_5_23.KINDS`)."""
    return launch_kind("EAGLE3", True, tmp_path_factory)


@pytest.fixture(scope="session")
def eagle3_nnpl0_on(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tiny EAGLE3 pair whose draft says ``num_nextn_predict_layers: 0``, plugin on."""
    return launch_kind("EAGLE3-nnpl0", True, tmp_path_factory)
