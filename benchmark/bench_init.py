"""Init time of the tiny EAGLE Engine on CPU: phased (plugin on) vs stock (plugin off).

Both variants run in the same invocation, alternating (patched, stock, stock, patched, ...) so
that slow drift of the machine hits both alike. Each sample is the wall time from starting the
Engine's driver process to the Engine being ready (interpreter start, imports, scheduler
spawn, both models, pools, backends); next to it, the CPU seconds the scheduler process had
used by then, which other load on the machine disturbs much less than wall time. Prints every
sample, the medians and patched/stock (the goal is <= 1.03). Nothing is asserted.

    .venv/bin/python benchmark/bench_init.py [--runs 3] [--case EAGLE]
"""

from __future__ import annotations

import argparse

from _common import CASES, launch, median, table


def _stats(label: str, values: list[float]) -> list[str]:
    return [label, f"{median(values):.2f}", f"{min(values):.2f}", f"{max(values):.2f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="launches per variant (default 3)")
    parser.add_argument("--case", default="EAGLE", choices=sorted(CASES))
    args = parser.parse_args()
    case = CASES[args.case]

    # ABBA order: patched first in even pairs, stock first in odd ones.
    order: list[bool] = []
    for i in range(args.runs):
        order += [True, False] if i % 2 == 0 else [False, True]
    wall: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    phase_totals: list[float] = []
    rows = []
    for n, patched in enumerate(order, 1):
        run = launch(case, patched)
        label = "patched" if patched else "stock"
        wall[patched].append(run.startup_s)
        if run.scheduler_cpu_s is not None:
            cpu[patched].append(run.scheduler_cpu_s)
        phases = ""
        if run.breakdown is not None:
            total = sum(run.breakdown["phase_seconds"].values())
            phase_totals.append(total)
            phases = f"{total:.2f}"
        cpu_cell = f"{run.scheduler_cpu_s:.2f}" if run.scheduler_cpu_s is not None else "-"
        rows.append([str(n), label, f"{run.startup_s:.2f}", cpu_cell, phases])
        print(f"[bench_init] run {n}/{len(order)} {label}: {run.startup_s:.2f} s", flush=True)

    print()
    print(f"Engine init time, {case.name} on device cpu (tiny models, {args.runs} runs each)")
    print(table(["run", "variant", "ready after (s)", "scheduler CPU (s)", "4 phases (s)"], rows))
    header = ["", "median (s)", "min (s)", "max (s)"]
    print()
    print("ready after (wall)")
    print(table(header, [_stats("patched", wall[True]), _stats("stock", wall[False])]))
    ratio = median(wall[True]) / median(wall[False])
    print(f"ratio patched/stock (medians): {ratio:.3f}  (goal <= 1.03)")
    if cpu[True] and cpu[False]:
        print()
        print("scheduler CPU time at ready")
        print(table(header, [_stats("patched", cpu[True]), _stats("stock", cpu[False])]))
        ratio = median(cpu[True]) / median(cpu[False])
        print(f"ratio patched/stock (medians): {ratio:.3f}  (goal <= 1.03)")
    if phase_totals:
        print()
        print(f"median time inside the 4 phases (patched): {median(phase_totals):.2f} s")


if __name__ == "__main__":
    main()
