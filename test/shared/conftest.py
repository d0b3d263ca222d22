"""Checks both launcher generations make alike: collected only where the installed release's row
says ``shared`` (0.5.13.post1 in ``.venv``, 0.5.23 in ``.venv-sglang0523``)."""

from __future__ import annotations

from pathlib import Path

from harness.releases import suite_gate

collect_ignore_glob, ROW = suite_gate(Path(__file__).parent)

