"""``sglang-specinit plan`` on the launches the live tests run (the same ``launch_server`` flags
plus the simulated device's capacity), so that the planner's verdict (exit 2 and one line, or a
plan) can be held to the launch's. test/conftest.py plans every launch that came up with the
plugin on after the test that started it, and prints the table."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.checkpoints import llama_family
from harness.launch import engine
from harness.launch.engine import drain_started
from harness.matrices.refused_launches import (
    ALGORITHM,
    NO_DRAFT_STEP,
    SPEC_FLAGS,
    Launch,
    target_without_head_count,
)

# The fault matrices' launch with nothing wrong, at page 1 and 16; odd launches that start; TP 3,
# whose heads device cpu pads (the planner refuses it on CUDA: test_plan_cli).
STARTS = {
    "intact-eagle3-pair": Launch(in_ci=False),
    "page-size-16": Launch({"page_size": 16}),
    "num-steps-0-topk-1": Launch(NO_DRAFT_STEP, adapters=("sglang_0_5_23",)),
    "no-num-attention-heads": Launch(make_target=target_without_head_count),
    "tp-3-on-cpu": Launch({"tp_size": 3}, in_ci=False),
    # Odd inputs that start (measured on 0.5.13.post1 and 0.5.23): the shortest context each
    # release's scheduler accepts, no chunked prefill, no draft tokens (topk 1 sets them).
    "context-length-7": Launch({"context_length": 7}, in_ci=False),
    "context-length-2": Launch({"context_length": 2}, in_ci=False, adapters=("sglang_0_5_23",)),
    "chunked-prefill-0": Launch({"chunked_prefill_size": 0}, in_ci=False),
    "num-draft-tokens-0": Launch({"speculative_num_draft_tokens": 0}, in_ci=False),
}

# Launches the server refuses on its ranks, after the launcher.
REFUSED_ON_RANKS = {
    "weights-leave-no-room": Launch(
        {"mem_fraction_static": 0.02},
        ("leave no room for the KV cache under --mem-fraction-static=0.02",
         "Pass --mem-fraction-static"),
    ),
}  # fmt: skip


def rows_of_this_generation(table: Mapping[str, Launch]) -> list[str]:
    from harness.releases import installed_row

    adapter = getattr(installed_row(), "adapter", None)
    return sorted(name for name, spec in table.items() if adapter in spec.adapters)


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

    def assert_plans(self) -> Verdict:
        """The planner plans the launch (exit 0, a table), never refuses it."""
        assert self.code == 0, self.err[-3000:]
        assert "tokens" in self.out, self.out
        return self


def launch_flags(
    draft: Path | None, *, target: Path | None = None, algorithm: str = ALGORITHM, **flags: Any
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


def plan_verdict(argv: list[str], capacity_bytes: int = engine.DEFAULT_CAPACITY_BYTES) -> Verdict:
    """``plan`` in this process on the launch's flags, for the simulated device."""
    from sglang_specinit.planner.cli import main

    out, err = io.StringIO(), io.StringIO()
    capacity = str(capacity_bytes)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        # The simulated device is empty before the weights load (no CUDA context to allow for).
        code = main(["plan", *argv, "--device-memory", capacity, "--pre-load-free-bytes", capacity])
    return Verdict(code, out.getvalue(), err.getvalue())


def launch_verdict(spec: Launch, draft: Path | None, target: Path, **flags: Any) -> Verdict:
    """``plan`` on the launch of a table's row (``flags`` on top of the row's)."""
    flags = {**spec.flags, **flags}
    return plan_verdict(launch_flags(draft, target=target, algorithm=spec.algorithm, **flags))


@dataclass(frozen=True)
class StartedLaunch:
    label: str
    argv: tuple[str, ...]
    capacity_bytes: int


def _label(kwargs: Mapping[str, Any]) -> str:
    """The launch in a few words: algorithm, checkpoints, and every flag the defaults lack."""
    algorithm = kwargs.get("speculative_algorithm")
    draft = kwargs.get("speculative_draft_model_path")
    defaults = engine.cpu_engine_kwargs(
        kwargs["model_path"], draft_model_path=draft, algorithm=algorithm
    )
    models = " + ".join(_checkpoint(path) for path in (kwargs["model_path"], draft) if path)
    changed = [
        f"{key}={value}" if len(str(value)) <= 24 else f"{key}=..."
        for key, value in kwargs.items()
        if key != "skip_server_warmup" and defaults.get(key) != value
    ]
    return " ".join([algorithm or "no-draft", models, *changed])


def _checkpoint(path: str) -> str:
    """A tiny checkpoint's directory name with its shape hash cut to 4 digits."""
    stem, _, digest = Path(path).name.rpartition("-")
    return f"{stem}-{digest[:4]}" if stem and len(digest) == 12 else Path(path).name


def started_launches() -> list[StartedLaunch]:
    """The launches that came up with the plugin on since the last call."""
    return [
        StartedLaunch(_label(kwargs), tuple(engine.server_args_to_cli(kwargs)), capacity)
        for kwargs, capacity in drain_started()
    ]


def assert_planned_like_started(launch: StartedLaunch) -> Verdict:
    """A launch the server started is planned."""
    return plan_verdict(list(launch.argv), launch.capacity_bytes).assert_plans()


def assert_refusal(planned: Verdict, needles: tuple[str, ...], draft: Path | None = None) -> str:
    """``planned`` is a one-line refusal holding every needle (``{draft}``: the draft's path)."""
    line = planned.refusal_line()
    for needle in needles:
        assert needle.format(draft=draft) in line, (needle, line)
    return line
