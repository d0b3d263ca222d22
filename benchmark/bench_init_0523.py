"""Init time of a tiny speculative Engine on sglang 0.5.23 (CPU): plugin on vs off.

The 0.5.23 adapter keeps upstream's init and adds one step: before the target's pool is
profiled it prices every pool by building it with 0.5.23's pool code at a few pages
(``sglang_0_5_23.runtime_budget.price_pools``); the breakdown it logs carries how long that
took (``pricing_seconds``). This script launches the same kind
(``test/harness/launch/launch_0_5_23``'s ``KINDS``, through ``harness.launch.engine.cpu_engine``)
with the plugin on and off, alternating ABBA (on, off, off, on, ...) so that slow drift of the
shared machine hits both alike, after ``--warmup`` unrecorded launches of each (the first launch
after a while pays for cold file caches and byte-compiling). Each sample is the wall time from
starting the Engine's driver process to the Engine being ready, and the CPU seconds the scheduler
and the launcher (driver) processes had used by then (less disturbed by other load than wall
time). Each launch is also split into phases read from its log and ``/proc`` (``_init_phases``:
launcher imports, the launcher's ``load_plugins()``, scheduler start-up, weights, pool sizing,
pools, ready). Prints every sample, medians, min/max, the on/off ratios of the medians, the
per-phase medians side by side and the median ``pricing_seconds`` of the plugin-on launches, and
the load averages before and after. With other work on the cores (load average above their
count) wall time is mostly queueing and the CPU seconds are the figures to compare. Nothing is
asserted.

    .venv-sglang0523/bin/python benchmark/bench_init_0523.py [--runs 3] [--warmup 1] [--kind EAGLE3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import descendant_pids, median, process_cpu_seconds, table
from _init_phases import PHASES, STAMP_ENV, phases, process_start_epoch
from harness.launch.engine import cpu_engine
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S, KINDS, launch_overrides
from harness.reports.report_reading import REPORT_DIR_ENV, read_breakdown

# CPU seconds at ready, per process: the Engine's own (the launcher, which also runs the
# tokenizer manager), its scheduler, the rest of its children (detokenizer, resource
# tracker), and all of them. On 2 shared cores the children compete with the scheduler, so
# their CPU shows up in its wall time.
CPU_KEYS = ("launcher", "scheduler", "detokenizer + other", "total")

SAMPLE_COLUMNS = [
    "run",
    "plugin",
    "ready after (s)",
    *(f"{key} CPU (s)" for key in CPU_KEYS),
    "pricing (s)",
    "target tokens",
]


@dataclass
class Sample:
    """One launch: wall seconds to ready, CPU seconds then, phases, the plugin's breakdown."""

    plugin: bool
    ready_s: float
    # CPU_KEYS -> seconds (those /proc could read).
    cpu_s: dict[str, float]
    breakdown: dict[str, Any] | None
    # The target pool's token count (the plugin sizes it differently; bigger pools cost more).
    tokens: int
    # Seconds per phase (``_init_phases.PHASES``), those found in the log.
    phases: dict[str, float]


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
        extra_env={REPORT_DIR_ENV: str(report_dir), **STAMP_ENV},
        **launch_overrides(spec),
    ) as engine:
        events = {"ready": time.time()}
        report = engine.scheduler_report()
        cpu_s = _cpu_at_ready(engine.proc.pid, report["pid"])
        for key, pid in (("driver", engine.proc.pid), ("scheduler", report["pid"])):
            if (start := process_start_epoch(pid)) is not None:
                events[key] = start
    target = next(r for r in report["model_runners"] if r["role"] == "target")
    return Sample(
        plugin,
        engine.startup_s,
        cpu_s,
        read_breakdown(report_dir),
        target["max_total_num_tokens"],
        phases(engine.log_path.read_text(errors="replace"), events),
    )


def _cpu_at_ready(launcher: int, scheduler: int) -> dict[str, float]:
    per_pid = {pid: process_cpu_seconds(pid) for pid in [launcher, *descendant_pids(launcher)]}
    if per_pid.get(launcher) is None or per_pid.get(scheduler) is None:
        return {}
    total = sum(v for v in per_pid.values() if v is not None)
    out = {"launcher": per_pid[launcher], "scheduler": per_pid[scheduler], "total": total}
    out["detokenizer + other"] = total - out["launcher"] - out["scheduler"]
    return out


def _stats(label: str, values: list[float]) -> list[str]:
    return [label, f"{median(values):.2f}", f"{min(values):.2f}", f"{max(values):.2f}"]


def _compare(title: str, on: list[float], off: list[float]) -> None:
    print()
    print(title)
    header = ["", "median (s)", "min (s)", "max (s)"]
    print(table(header, [_stats("on", on), _stats("off", off)]))
    print(f"ratio on/off (medians): {median(on) / median(off):.3f}")


def _phase_table(on: list[Sample], off: list[Sample]) -> str:
    rows = []
    for name in PHASES:
        a = [s.phases[name] for s in on if name in s.phases]
        b = [s.phases[name] for s in off if name in s.phases]
        if not a or not b:
            continue
        ma, mb = median(a), median(b)
        rows.append([name, f"{ma:.3f}", f"{mb:.3f}", f"{ma - mb:+.3f}"])
    total_on = median([sum(s.phases.values()) for s in on])
    total_off = median([sum(s.phases.values()) for s in off])
    rows.append(
        ["sum of phases", f"{total_on:.3f}", f"{total_off:.3f}", f"{total_on - total_off:+.3f}"]
    )
    return table(["phase (medians)", "on (s)", "off (s)", "on-off (s)"], rows)


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="launches per variant (default 3)")
    parser.add_argument(
        "--warmup", type=int, default=1, help="unrecorded launches per variant first (default 1)"
    )
    parser.add_argument("--kind", default="EAGLE3", choices=sorted(KINDS))
    args = parser.parse_args()
    load_before = _load()

    # ABBA order: plugin on first in even pairs, off first in odd ones.
    order: list[bool] = []
    for i in range(args.runs):
        order += [True, False] if i % 2 == 0 else [False, True]
    samples: list[Sample] = []
    rows = []
    with tempfile.TemporaryDirectory(prefix="specinit-bench0523-") as tmp:
        for n, plugin in enumerate([True, False] * args.warmup, 1):
            s = launch(args.kind, plugin, Path(tmp) / "warmup", n)
            label = "on" if plugin else "off"
            print(
                f"[bench_init_0523] warm-up {label}: {s.ready_s:.2f} s (not recorded)", flush=True
            )
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
                    *(f"{s.cpu_s[k]:.2f}" if k in s.cpu_s else "-" for k in CPU_KEYS),
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
    for key in CPU_KEYS:
        cpu_on = [s.cpu_s[key] for s in on if key in s.cpu_s]
        cpu_off = [s.cpu_s[key] for s in off if key in s.cpu_s]
        if cpu_on and cpu_off:
            _compare(f"{key} CPU time at ready", cpu_on, cpu_off)
    print()
    print("phases (from SGLANG_LOG_MS log stamps and /proc process starts)")
    print(_phase_table(on, off))
    pricing = [p for s in on if (p := (s.breakdown or {}).get("pricing_seconds")) is not None]
    print()
    if pricing:
        print(
            f"pricing_seconds (plugin on, price_pools): median {median(pricing):.3f} s, "
            f"min {min(pricing):.3f}, max {max(pricing):.3f}"
        )
    else:
        print("pricing_seconds: no plugin-on breakdown was written")
    print(f"load averages (1/5/15 min): before {load_before}, after {_load()}")


if __name__ == "__main__":
    main()
