"""Makes ``test/harness`` importable as ``harness`` for every test directory.

``test/`` itself is not a package (pytest's rootdir-relative test ids stay short).
"""

from __future__ import annotations

import sys
from pathlib import Path

_TEST_DIR = str(Path(__file__).resolve().parent)
if _TEST_DIR not in sys.path:
    sys.path.insert(0, _TEST_DIR)
