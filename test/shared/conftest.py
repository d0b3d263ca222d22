"""Checks both generations make alike, collected where the installed release's row says so."""

from __future__ import annotations

from pathlib import Path

from harness.releases import suite_gate

collect_ignore_glob, ROW = suite_gate(Path(__file__).parent)
