"""The ``sglang_0_5_13`` suite (0.5.13.post1 in ``.venv``; on any other release nothing here is
collected), and fixtures for its tests that run real SGLang classes on device "cpu"."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.checkpoints import llama_family
from harness.releases import suite_gate

collect_ignore_glob, ROW = suite_gate(Path(__file__).parent)


@pytest.fixture(scope="session")
def tiny_target() -> Path:
    """Tiny Llama target: hidden 64, 2 layers, 4 heads, 2 KV heads of dim 16, vocab 32000."""
    return llama_family.tiny_llama_target()
