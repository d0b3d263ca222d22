"""The ``sglang_0_5_14`` generation suite (0.5.14 - 0.5.15.post1): the files each row lists."""

from __future__ import annotations

from pathlib import Path

from harness.releases import suite_gate

collect_ignore_glob, ROW = suite_gate(Path(__file__).parent)
