"""``sglang-specinit patches`` in the 0.5.23 environment: with no ``--release`` it lists the
installed 0.5.23's adapter, and imports nothing of SGLang. The unit tests check the listing
against the adapters' tables (.venv); ``test_adapter_signatures.py`` checks those tables against
the installed 0.5.23."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys

from sglang_specinit.planner.cli import main


def patches(*argv: str) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["patches", *argv]) == 0
    return out.getvalue().splitlines()


def test_default_is_the_installed_0_5_23_and_imports_no_sglang() -> None:
    code = (
        "import json, sys\n"
        "from sglang_specinit.planner.cli import main\n"
        "code = main(['patches'])\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('sglang.', 'torch')))\n"
        "print(json.dumps([code, loaded]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    assert json.loads(out[-1]) == [0, []]
    assert out[:-1] == patches("--release", "0.5.23")
    assert out[0].startswith("sglang 0.5.23: adapter sglang_specinit.sglang_0_5_23,")
