"""The ``sglang-specinit`` command line run in this process, and what it answered."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Mapping
from typing import Any, NamedTuple
from unittest import mock


class Verdict(NamedTuple):
    code: int
    out: str
    err: str

    def verdict(self) -> str:
        """What the planner said: ``refuses`` (exit 2), ``starts`` (a plan), else the exit code."""
        return {0: "starts", 2: "refuses"}.get(self.code, f"exit {self.code}")

    def refusal_line(self) -> str:
        """The one line on stderr of a run that exits 2, with nothing on stdout, no traceback."""
        lines = self.err.strip().splitlines()
        assert self.code == 2 and self.out == "", (self.code, self.out[-2000:], self.err[-2000:])
        assert len(lines) == 1 and "Traceback" not in self.err, self.err[-3000:]
        return lines[0]

    def assert_plans(self) -> Verdict:
        """The planner plans the launch (exit 0, a table), never refuses it."""
        assert self.code == 0, self.err[-3000:]
        assert "tokens" in self.out, self.out
        return self

    def json(self) -> dict[str, Any]:
        """The ``--json`` output of a run that exits 0."""
        assert self.code == 0, self.err[-3000:]
        return json.loads(self.out)


def run_cli(argv: list[str], env: Mapping[str, str] | None = None) -> Verdict:
    """The command line ``argv`` in this process, ``env`` set meanwhile."""
    from sglang_specinit.planner.cli import main

    out, err = io.StringIO(), io.StringIO()
    # Only a given env is patched: one the run itself sets stays visible to the test.
    patched = mock.patch.dict(os.environ, env) if env else contextlib.nullcontext()
    with patched, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return Verdict(code, out.getvalue(), err.getvalue())


def plan_json(*argv: str) -> dict[str, Any]:
    """``plan --json *argv``, which must exit 0, read."""
    return run_cli(["plan", "--json", *argv]).json()
