"""What ``load_plugins()`` costs each SGLang process, plugin on vs off, side by side.

Each sample is a fresh interpreter that first imports what that SGLang process has imported
when it calls ``load_plugins()`` (the launcher: ``server_args``; a scheduler:
``managers.scheduler``), then times ``load_plugins()`` and counts the modules it imported.
Variants alternate (on, off, off, on, ...). Prints every sample, the medians and on/off.
Nothing is asserted.

    .venv/bin/python benchmark/bench_plugin_load.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from _common import median, table

PROBE = """
import importlib, json, sys, time
importlib.import_module(sys.argv[1])
before = set(sys.modules)
start = time.perf_counter()
from sglang.srt.plugins import load_plugins
load_plugins()
elapsed = time.perf_counter() - start
new = set(sys.modules) - before
print("LOAD " + json.dumps({
    "seconds": elapsed,
    "modules": len(new),
    "sglang_modules": len([m for m in new if m.startswith("sglang.")]),
}))
"""

PROCESSES = {
    "launcher": "sglang.srt.server_args",
    "scheduler": "sglang.srt.managers.scheduler",
}


def sample(process: str, plugin: bool) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_SPECINIT_")}
    env.update(
        SGLANG_USE_CPU_ENGINE="1",
        HF_HUB_OFFLINE="1",
        SGLANG_PLUGINS="specinit" if plugin else "none-specinit-disabled",
    )
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, PROCESSES[process]],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("LOAD ")]
    return json.loads(line[len("LOAD ") :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="samples per variant (default 5)")
    args = parser.parse_args()
    for process in PROCESSES:
        order: list[bool] = []
        for i in range(args.runs):
            order += [True, False] if i % 2 == 0 else [False, True]
        results: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        rows = []
        for n, plugin in enumerate(order, 1):
            result = sample(process, plugin)
            results[plugin].append(result)
            rows.append(
                [
                    str(n),
                    "on" if plugin else "off",
                    f"{result['seconds'] * 1000:.1f}",
                    str(result["modules"]),
                    str(result["sglang_modules"]),
                ]
            )
        print(f"load_plugins() in a fresh {process} process ({PROCESSES[process]} imported)")
        print(table(["run", "plugin", "ms", "modules imported", "of them sglang.*"], rows))
        on = median([r["seconds"] for r in results[True]]) * 1000
        off = median([r["seconds"] for r in results[False]]) * 1000
        print(f"median: on {on:.1f} ms, off {off:.1f} ms, difference {on - off:.1f} ms")
        print()


if __name__ == "__main__":
    main()
