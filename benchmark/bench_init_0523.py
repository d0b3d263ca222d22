"""Init time of a tiny speculative Engine on sglang 0.5.23 (CPU): plugin on vs off.

The 0.5.23 adapter keeps upstream's init and adds one step: before the target's pool is
profiled it prices every pool by building it with 0.5.23's pool code at a few pages
(``sglang_0_5_23.runtime_budget.price_pools``); the breakdown it logs carries how long that
took (``pricing_seconds``). This script launches the same kind
(``test/harness/launch/launch_0_5_23``'s ``KINDS``, through ``harness.launch.engine.cpu_engine``)
with the plugin on and off, alternating ABBA (on, off, off, on, ...) so that slow drift of the
shared machine hits both alike. Each sample is the wall time from starting the Engine's driver
process to the Engine being ready, and the CPU seconds the scheduler process had used by then (less
disturbed by other load than wall time). Prints every sample, medians, min/max, the on/off ratios of
the medians and the median ``pricing_seconds`` of the plugin-on launches. Nothing is asserted.

    .venv-sglang0523/bin/python benchmark/bench_init_0523.py [--runs 3] [--kind EAGLE3]
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import median, process_cpu_seconds, table
from harness.launch.engine import cpu_engine
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S, KINDS, launch_overrides
from harness.reports.report_reading import REPORT_DIR_ENV, read_breakdown

SAMPLE_COLUMNS = [
    "run",
    "plugin",
    "ready after (s)",
    "scheduler CPU (s)",
    "pricing (s)",
    "target tokens",
]


@dataclass
class Sample:
    """One launch: wall seconds to ready, scheduler CPU seconds then, the plugin's breakdown."""

    plugin: bool
    ready_s: float
    scheduler_cpu_s: float | None
    breakdown: dict[str, Any] | None
    # The target pool's token count (the plugin sizes it differently; bigger pools cost more).
    tokens: int


def launch(kind: str, plugin: bool, root: Path, n: int) -> Sample:
    """Start ``kind``'s Engine (plugin on or off), read what it reports, shut it down.

    Unlike the test harness's launch, no per-tensor report is asked for (it would add its own
    cost to both variants)."""
    spec = KINDS[kind]
    work = root / f"{n:02d}-{kind}-{'on' if plugin else 'off'}"
    report_dir = work / "memory"
    report_dir.mkdir(parents=True)
    with cpu_engine(
        spec.target(),
        draft_model_path=spec.draft(),
        algorithm=spec.algorithm,
        plugin=plugin,
        work_dir=work,
        startup_timeout_s=ENGINE_TIMEOUT_S,
        extra_env={REPORT_DIR_ENV: str(report_dir)},
        **launch_overrides(spec),
    ) as engine:
        report = engine.scheduler_report()
        cpu_s = process_cpu_seconds(report["pid"])
    target = next(r for r in report["model_runners"] if r["role"] == "target")
    return Sample(
        plugin, engine.startup_s, cpu_s, read_breakdown(report_dir), target["max_total_num_tokens"]
    )


def _stats(label: str, values: list[float]) -> list[str]:
    return [label, f"{median(values):.2f}", f"{min(values):.2f}", f"{max(values):.2f}"]


def _compare(title: str, on: list[float], off: list[float]) -> None:
    print()
    print(title)
    header = ["", "median (s)", "min (s)", "max (s)"]
    print(table(header, [_stats("on", on), _stats("off", off)]))
    print(f"ratio on/off (medians): {median(on) / median(off):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="launches per variant (default 3)")
    parser.add_argument("--kind", default="EAGLE3", choices=sorted(KINDS))
    args = parser.parse_args()

    # ABBA order: plugin on first in even pairs, off first in odd ones.
    order: list[bool] = []
    for i in range(args.runs):
        order += [True, False] if i % 2 == 0 else [False, True]
    samples: list[Sample] = []
    rows = []
    with tempfile.TemporaryDirectory(prefix="specinit-bench0523-") as tmp:
        for n, plugin in enumerate(order, 1):
            s = launch(args.kind, plugin, Path(tmp), n)
            samples.append(s)
            label = "on" if plugin else "off"
            pricing = (s.breakdown or {}).get("pricing_seconds")
            rows.append(
                [
                    str(n),
                    label,
                    f"{s.ready_s:.2f}",
                    f"{s.scheduler_cpu_s:.2f}" if s.scheduler_cpu_s is not None else "-",
                    f"{pricing:.3f}" if pricing is not None else "-",
                    str(s.tokens),
                ]
            )
            print(f"[bench_init_0523] run {n}/{len(order)} {label}: {s.ready_s:.2f} s", flush=True)

    print()
    print(f"Engine init time on sglang 0.5.23, {args.kind} on device cpu ({args.runs} runs each)")
    print(table(SAMPLE_COLUMNS, rows))
    on = [s for s in samples if s.plugin]
    off = [s for s in samples if not s.plugin]
    _compare("ready after (wall)", [s.ready_s for s in on], [s.ready_s for s in off])
    cpu_on = [s.scheduler_cpu_s for s in on if s.scheduler_cpu_s is not None]
    cpu_off = [s.scheduler_cpu_s for s in off if s.scheduler_cpu_s is not None]
    if cpu_on and cpu_off:
        _compare("scheduler CPU time at ready", cpu_on, cpu_off)
    pricing = [p for s in on if (p := (s.breakdown or {}).get("pricing_seconds")) is not None]
    print()
    if pricing:
        print(
            f"pricing_seconds (plugin on, price_pools): median {median(pricing):.3f} s, "
            f"min {min(pricing):.3f}, max {max(pricing):.3f}"
        )
    else:
        print("pricing_seconds: no plugin-on breakdown was written")


if __name__ == "__main__":
    main()
