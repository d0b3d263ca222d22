"""Checks every generation suite makes the same way, run on the releases whose row in
:mod:`harness.releases` says ``shared`` (0.5.13.post1 in ``.venv``, 0.5.23 in
``.venv-sglang0523``), with that row's expectations. On any other release nothing here is
collected.
"""

from __future__ import annotations

from pathlib import Path

from harness.releases import suite_gate

collect_ignore_glob, ROW = suite_gate(Path(__file__).parent)

