"""What ``load_plugins()`` costs each SGLang process, plugin on vs off, side by side.

Each sample is a fresh interpreter that first imports what that SGLang process has imported
when it calls ``load_plugins()`` (the launcher: ``server_args``; a scheduler:
``managers.scheduler``), then times ``load_plugins()`` and counts the modules it imported, then
times importing the modules a speculative scheduler imports later that the plugin patches as
they are imported (``kv_cache_configurator``, ``eagle_worker_v2``). Variants alternate (on,
off, off, on, ...). Prints every sample, the medians and on/off. Nothing is asserted.

    .venv/bin/python benchmark/bench_plugin_load.py [--runs 5]
    .venv-sglang0523/bin/python benchmark/bench_plugin_load.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from _common import median, table
from harness.launch.sglang_release import extra_python_path

PROBE = """
import importlib, json, sys, time
importlib.import_module(sys.argv[1])
before = set(sys.modules)
start = time.perf_counter()
from sglang.srt.plugins import load_plugins
load_plugins()
elapsed = time.perf_counter() - start
new = set(sys.modules) - before
start = time.perf_counter()
for name in sys.argv[2:]:
    importlib.import_module(name)
later = time.perf_counter() - start
print("LOAD " + json.dumps({
    "seconds": elapsed,
    "later_seconds": later,
    "modules": len(new),
    "sglang_modules": len([m for m in new if m.startswith("sglang.")]),
}))
"""

# Per process: what it has imported at load_plugins(), and what it imports later.
PROCESSES = {
    "launcher": ("sglang.srt.server_args", ()),
    "scheduler": (
        "sglang.srt.managers.scheduler",
        ("sglang.srt.mem_cache.kv_cache_configurator", "sglang.srt.speculative.eagle_worker_v2"),
    ),
}


def sample(process: str, plugin: bool) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_SPECINIT_")}
    env.update(
        SGLANG_USE_CPU_ENGINE="1",
        HF_HUB_OFFLINE="1",
        SGLANG_PLUGINS="specinit" if plugin else "none-specinit-disabled",
    )
    # 0.5.23's scheduler imports sgl_kernel's CPU ops: the harness's test double.
    python_path = [*extra_python_path(), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in python_path if p)
    first, later = PROCESSES[process]
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, first, *later],
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
                    f"{result['later_seconds'] * 1000:.1f}",
                    str(result["modules"]),
                    str(result["sglang_modules"]),
                ]
            )
        first, later = PROCESSES[process]
        print(f"load_plugins() in a fresh {process} process ({first} imported)")
        header = ["run", "plugin", "ms", "later imports ms", "modules imported", "of them sglang.*"]
        print(table(header, rows))
        for key, what in (("seconds", "load_plugins()"), ("later_seconds", "later imports")):
            if key == "later_seconds" and not later:
                continue
            on = median([r[key] for r in results[True]]) * 1000
            off = median([r[key] for r in results[False]]) * 1000
            print(f"{what} median: on {on:.1f} ms, off {off:.1f} ms, difference {on - off:.1f} ms")
        print()


if __name__ == "__main__":
    main()
