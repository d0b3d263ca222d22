"""``sglang-specinit plan`` on the launches the live matrices start: the same ``launch_server``
flags (``harness.launch.engine.cpu_engine_kwargs``) plus the simulated device's capacity, so
that the planner's verdict (exit 2 and one line, or a plan) can be held to the launch's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.checkpoints import llama_family
from harness.launch import engine
from harness.matrices.refused_launches import ALGORITHM, REFUSED, SPEC_FLAGS, Row, intact_draft

# Launches the server starts: the fault matrices' launch with nothing wrong, at page 1 and 16,
# and at TP 3, whose 4 heads device cpu pads (SGLang's unaligned CPU TP; on CUDA every rank's
# Llama asserts the split, and the planner refuses it there: test_plan_cli).
STARTS = {
    "intact-eagle3-pair": {},
    "page-size-16": {"page_size": 16},
    "tp-3-on-cpu": {"tp_size": 3},
}


# Launches the server refuses on its ranks, after the launcher: (flags, what the line says).
# Live, 0.5.13.post1: the plugin's pool phase stops it with this line; 0.5.23: its own sizing
# does first ("Loaded weights leave no GPU memory for the KV cache").
REFUSED_ON_RANKS = {
    "weights-leave-no-room": (
        {"mem_fraction_static": 0.02},
        ("leave no room for the KV cache under --mem-fraction-static=0.02",
         "Pass --mem-fraction-static"),
    ),
}  # fmt: skip


# The user property a live-verdict test records (launch, planner's verdict, live verdict) under;
# test/conftest.py prints them as one table after the run.
VERDICT_PROPERTY = "plan_vs_live"


@dataclass(frozen=True)
class Verdict:
    code: int
    out: str
    err: str

    def verdict(self) -> str:
        """What the planner said: ``refuses`` (exit 2), ``starts`` (a plan), else the exit code."""
        return {0: "starts", 2: "refuses"}.get(self.code, f"exit {self.code}")

    def refusal_line(self) -> str:
        lines = self.err.strip().splitlines()
        assert self.code == 2 and self.out == "", (self.code, self.out[-2000:], self.err[-2000:])
        assert len(lines) == 1 and "Traceback" not in self.err, self.err[-3000:]
        return lines[0]


def launch_flags(
    draft: Path, *, target: Path | None = None, algorithm: str = ALGORITHM, **flags: Any
) -> list[str]:
    """The live row's ``launch_server`` flags (default: the fault matrices' TP 1 launch)."""
    kwargs = engine.cpu_engine_kwargs(
        target or llama_family.tiny_llama_target(),
        draft_model_path=draft,
        algorithm=algorithm,
        skip_server_warmup=True,
        **{**SPEC_FLAGS, **flags},
    )
    return engine.server_args_to_cli(kwargs)


def plan_verdict(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Verdict:
    """``plan`` in this process on the launch's flags, for the simulated device."""
    from sglang_specinit.planner.cli import main

    capsys.readouterr()
    capacity = str(engine.DEFAULT_CAPACITY_BYTES)
    # The simulated device is empty before the weights load (no CUDA context to allow for).
    code = main(["plan", *argv, "--device-memory", capacity, "--pre-load-free-bytes", capacity])
    out, err = capsys.readouterr()
    return Verdict(code, out, err)


def assert_refused_like_the_launcher(
    capsys: pytest.CaptureFixture[str], name: str, tmp_path: Path
) -> str:
    """The row's plan is refused in one line carrying every needle the launcher's line must."""
    row: Row = REFUSED[name]
    draft = row.make_draft(tmp_path)
    line = plan_verdict(capsys, launch_flags(draft, **row.flags)).refusal_line()
    for needle in row.expect:
        assert needle.format(draft=draft) in line, (needle, line)
    return line


def assert_refused_on_ranks(capsys: pytest.CaptureFixture[str], name: str, tmp_path: Path) -> str:
    flags, needles = REFUSED_ON_RANKS[name]
    line = plan_verdict(capsys, launch_flags(intact_draft(tmp_path), **flags)).refusal_line()
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def assert_planned(capsys: pytest.CaptureFixture[str], name: str, tmp_path: Path) -> str:
    """A launch the server starts is planned (exit 0, a table), never refused."""
    verdict = plan_verdict(capsys, launch_flags(intact_draft(tmp_path), **STARTS[name]))
    assert verdict.code == 0, verdict.err[-3000:]
    assert "tokens" in verdict.out, verdict.out
    return verdict.out
