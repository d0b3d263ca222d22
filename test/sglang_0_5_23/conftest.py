"""The ``sglang_0_5_23`` generation suite (0.5.16 - 0.5.23): each release runs the files its row in
:mod:`harness.releases` lists, with its row's expectations."""

from __future__ import annotations

from pathlib import Path

from harness.releases import suite_gate

collect_ignore_glob, ROW = suite_gate(Path(__file__).parent)
