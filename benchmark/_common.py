"""Shared pieces of the CPU benchmarks: the launch matrix, one Engine launch, tables.

The benchmarks drive real ``sglang.Engine`` launches on device cpu through the test harness
(``test/harness``, put on ``sys.path`` here): tiny generated checkpoints and the deterministic
simulated device memory (capacity minus the scheduler process's live CPU tensor bytes). The
reports are read, and the meter arithmetic done, with ``harness.reports.report_reading``, as in the
tests. Nothing here checks results; the scripts print tables.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT / "test") not in sys.path:
    sys.path.insert(0, str(REPO_ROOT / "test"))

from harness.checkpoints import eagle_drafts, llama_family  # noqa: E402
from harness.checkpoints.llama_family import DEFAULT_TARGET  # noqa: E402
from harness.checkpoints.llama_layout import TinyLlamaShape  # noqa: E402
from harness.launch.engine import DEFAULT_CAPACITY_BYTES, cpu_engine  # noqa: E402
from harness.reports.report_reading import REPORT_DIR_ENV, read_breakdown  # noqa: E402

FRACTION = 0.5
CAPACITY = DEFAULT_CAPACITY_BYTES
# The real sglang 0.5.14 (built by scripts/setup.sh: its wheel layered over .venv).
UPSTREAM_0_5_14_PYTHON = REPO_ROOT / ".venv-sglang0514" / "bin" / "python"

# A small Llama used as a STANDALONE draft: the target's vocab/hidden, one layer.
STANDALONE_DRAFT = replace(DEFAULT_TARGET, layers=1, intermediate=64)


@dataclass(frozen=True)
class Case:
    """One row of the launch matrix."""

    name: str
    algorithm: str
    draft_shape: TinyLlamaShape
    make_draft: Callable[[], Path]
    # How many vocab x hidden tensors the draft allocates and then replaces with the target's
    # (embed, lm_head) when it binds them; upstream 0.5.14 profiles before that release.
    shared_tensors: int


CASES: dict[str, Case] = {
    c.name: c
    for c in (
        Case(
            "EAGLE",
            "EAGLE",
            eagle_drafts.DEFAULT_EAGLE_DRAFT,
            eagle_drafts.tiny_eagle_draft,
            2,
        ),
        Case(
            "EAGLE3 (other KV geometry)",
            "EAGLE3",
            eagle_drafts.DEFAULT_EAGLE3_DRAFT,
            eagle_drafts.tiny_eagle3_draft,
            1,
        ),
        Case(
            "EAGLE3 nnpl=0",
            "EAGLE3",
            eagle_drafts.DEFAULT_EAGLE3_DRAFT,
            lambda: eagle_drafts.tiny_eagle3_draft(num_nextn_predict_layers=0),
            1,
        ),
        Case(
            "STANDALONE (1-layer llama)",
            "STANDALONE",
            STANDALONE_DRAFT,
            lambda: llama_family.tiny_llama_target(STANDALONE_DRAFT),
            0,
        ),
    )
}


@dataclass
class Launch:
    """What one Engine launch left behind (collected before it was shut down)."""

    case: Case
    patched: bool
    startup_s: float
    # CPU seconds the scheduler process had used when the Engine was ready (less sensitive to
    # other load on the machine than wall time); None where /proc is unavailable.
    scheduler_cpu_s: float | None
    report: dict[str, Any]
    breakdown: dict[str, Any] | None
    draft_path: Path


def launch(
    case: Case,
    patched: bool,
    capacity: int = CAPACITY,
    python: Path | None = None,
    sglang_release: str = "0.5.13",
) -> Launch:
    """Start the case's Engine (plugin on or off), collect its reports, shut it down.

    ``python`` (with ``sglang_release``) runs another SGLang: ``.venv-sglang0514``'s
    interpreter and ``"0.5.14"`` start the real upstream 0.5.14 Engine on the same inputs.
    """
    draft = case.make_draft()
    with tempfile.TemporaryDirectory(prefix="specinit-bench-") as tmp:
        work = Path(tmp)
        specinit_dir = work / "specinit"
        specinit_dir.mkdir()
        with cpu_engine(
            llama_family.tiny_llama_target(),
            draft_model_path=draft,
            algorithm=case.algorithm,
            plugin=patched,
            capacity_bytes=capacity,
            mem_fraction_static=FRACTION,
            work_dir=work,
            extra_env={REPORT_DIR_ENV: str(specinit_dir)},
            python=python,
            sglang_release=sglang_release,
        ) as engine:
            report = engine.scheduler_report()
            cpu_s = process_cpu_seconds(report["pid"])
        breakdown = read_breakdown(specinit_dir)
        return Launch(case, patched, engine.startup_s, cpu_s, report, breakdown, draft)


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process, all threads (Linux /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def descendant_pids(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (``/proc/<pid>/task/<tid>/children``), depth first."""
    out: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            children = [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        for child in children:
            out += [child, *descendant_pids(child)]
    return out


def median(values: list[float]) -> float:
    return statistics.median(values)


def table(header: list[str], rows: list[list[str]]) -> str:
    """A right-aligned fixed-width table (first column left-aligned)."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        first, *rest = (str(c) for c in cells)
        return "  ".join(
            [first.ljust(widths[0]), *(c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))]
        )

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])
