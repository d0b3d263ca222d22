"""Shared pieces of the CPU benchmarks: the launch matrix, one Engine launch, meter arithmetic.

The benchmarks drive real ``sglang.Engine`` launches on device cpu through the test harness
(``test/harness``): tiny generated checkpoints and the deterministic simulated device memory
(capacity minus the scheduler process's live CPU tensor bytes). Nothing here asserts; the
scripts print tables.
"""

from __future__ import annotations

import json
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

from harness import tiny_models  # noqa: E402
from harness.engine import DEFAULT_CAPACITY_BYTES, cpu_engine  # noqa: E402
from harness.tiny_models import DEFAULT_TARGET, TinyLlamaShape  # noqa: E402
from sglang_specinit import budget  # noqa: E402

GIB = 1 << 30
FRACTION = 0.5
CAPACITY = DEFAULT_CAPACITY_BYTES
REPORT_DIR_ENV = "SGLANG_SPECINIT_REPORT_DIR"

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
            tiny_models.DEFAULT_EAGLE_DRAFT,
            tiny_models.tiny_eagle_draft,
            2,
        ),
        Case(
            "EAGLE3 (other KV geometry)",
            "EAGLE3",
            tiny_models.DEFAULT_EAGLE3_DRAFT,
            tiny_models.tiny_eagle3_draft,
            1,
        ),
        Case(
            "EAGLE3 nnpl=0",
            "EAGLE3",
            tiny_models.DEFAULT_EAGLE3_DRAFT,
            lambda: tiny_models.tiny_eagle3_draft(num_nextn_predict_layers=0),
            1,
        ),
        Case(
            "STANDALONE (1-layer llama)",
            "STANDALONE",
            STANDALONE_DRAFT,
            lambda: tiny_models.tiny_llama_target(STANDALONE_DRAFT),
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


def launch(case: Case, patched: bool, capacity: int = CAPACITY) -> Launch:
    """Start the case's Engine (plugin on or off), collect its reports, shut it down."""
    draft = case.make_draft()
    with tempfile.TemporaryDirectory(prefix="specinit-bench-") as tmp:
        work = Path(tmp)
        specinit_dir = work / "specinit"
        specinit_dir.mkdir()
        with cpu_engine(
            tiny_models.tiny_llama_target(),
            draft_model_path=draft,
            algorithm=case.algorithm,
            plugin=patched,
            capacity_bytes=capacity,
            mem_fraction_static=FRACTION,
            work_dir=work,
            extra_env={REPORT_DIR_ENV: str(specinit_dir)},
        ) as engine:
            report = engine.scheduler_report()
            cpu_s = process_cpu_seconds(report["pid"])
        path = specinit_dir / "memory-rank0.json"
        breakdown = json.loads(path.read_text()) if path.is_file() else None
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


# --------------------------------------------------------------------------- meter arithmetic


def _readings(report: dict[str, Any], suffix: str, is_draft: bool) -> list[dict[str, Any]]:
    return [
        r
        for r in report["meter"]["readings"]
        if r["caller"].endswith(suffix) and r["is_draft_worker"] is is_draft
    ]


def pre_load_free_bytes(report: dict[str, Any]) -> int:
    """The target's pre_model_load_memory (2nd init_torch_distributed reading), in bytes."""
    reading = _readings(report, ".init_torch_distributed", False)[1]
    return int(reading["free_bytes"] / GIB * GIB)


def measured_resident_bytes(report: dict[str, Any], fraction: float = FRACTION) -> int:
    """What SGLang saw as resident when it sized the target pool (its own float arithmetic)."""
    pre_gib = pre_load_free_bytes(report) / GIB
    (profile,) = _readings(report, "._profile_available_bytes", False)
    available = int((profile["free_bytes"] / GIB - pre_gib * (1 - fraction)) * GIB)
    return int(fraction * int(pre_gib * GIB)) - available


def runner(report: dict[str, Any], role: str) -> dict[str, Any]:
    (found,) = [r for r in report["model_runners"] if r["role"] == role]
    return found


def pool_bytes(report: dict[str, Any], role: str) -> int:
    """K + V buffer bytes of the live pool of the target or draft runner."""
    pool = runner(report, role)["kv_pool"]
    return pool["k_bytes"] + pool["v_bytes"]


def kv_spec(shape: TinyLlamaShape) -> budget.AttentionKVSpec:
    return budget.AttentionKVSpec(
        num_layers=shape.layers,
        kv_dtype=shape.dtype,
        num_kv_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        v_head_dim=shape.head_dim,
    )


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
