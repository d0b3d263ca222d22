"""What the generation suites share: the checks of a release's EAGLE3 launch that do not depend on
the release."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.launch.sglang_release import extra_python_path

# What the plan and the server's breakdown must agree on.
PLAN_KEYS = (
    "tokens",
    "max_running_requests",
    "target_kv_bytes_per_token",
    "draft_kv_bytes_per_token",
    "target_kv_pool_bytes",
    "draft_kv_pool_bytes",
    "draft_fixed_pool_bytes",
    "budget_bytes",
    "resident_bytes",
)

# ``plan --json`` and its bound (it imports SGLang and builds pricing pools: ~15-45 s here).
PLAN_JSON = [sys.executable, "-m", "sglang_specinit.planner.cli", "plan", "--json"]
PLANNER_TIMEOUT_S = 600


def engine_kwargs(kind: str = "EAGLE3") -> dict[str, Any]:
    """The Engine kwargs :mod:`harness.launch.launch_0_5_23` starts ``kind`` with."""
    from harness.launch.engine import cpu_engine_kwargs
    from harness.launch.launch_0_5_23 import launch_args

    return cpu_engine_kwargs(**launch_args(kind))


def launched_memory(run: Any) -> dict[str, Any]:
    """The run's breakdown; fails with the log's tail when there is none."""
    memory = run.memory
    assert memory is not None, run.log[-3000:]
    return memory


def assert_fills_the_budget_at_profile(run: Any, kind: str = "EAGLE3") -> dict[str, Any]:
    """The plugin sized the installed release's launch, filling its budget: the breakdown."""
    from sglang_specinit.compat import installed_sglang_version

    memory = launched_memory(run)
    assert run.report["specinit_loaded"]
    assert memory["sglang_version"] == installed_sglang_version()
    assert_weights_and_pools_fill(run, engine_kwargs(kind)["mem_fraction_static"])
    assert memory["target_kv_pool_bytes"] == memory["allocated_target_kv_pool_bytes"]
    assert memory["draft_kv_pool_bytes"] == memory["allocated_draft_kv_pool_bytes"]
    return memory


def assert_weights_and_pools_fill(run: Any, fraction: float) -> tuple[int, int]:
    """Budget = ``fraction`` x pre-load free; profiled weights + pools + the draft's request rows
    fill it to [0.995, 1]: (used, budget)."""
    memory = launched_memory(run)
    budget = int(fraction * run.pre_load_free_bytes)
    assert memory["budget_bytes"] == budget
    pools = sum(p.get("token_buffer_bytes", 0) for p in run.report["kv_pool_buffers"])
    used = run.resident_at_profile + pools + memory.get("draft_request_bytes", 0)
    assert 0.995 <= used / budget <= 1, (used, budget)
    return used, budget


def eagle3_plan_argv(
    target: Path, draft: Path, measured: Mapping[str, Any], *flags: str, device_memory: int
) -> list[str]:
    """``plan --json`` for an EAGLE3 pair (3/1/4) on cpu, told a plugin server's measurements."""
    return [
        *PLAN_JSON, "--model-path", str(target),
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", str(draft),
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4",
        "--mem-fraction-static", str(measured["mem_fraction_static"]), *flags,
        "--device", "cpu", "--device-memory", str(device_memory),
        "--pre-load-free-bytes", str(measured["pre_load_free_bytes"]),
        "--resident-bytes", str(measured["resident_bytes"]),
    ]  # fmt: skip


def run_planner(argv: list[str], extra_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run the planner as an operator would: no CPU engine switch, the release's CPU path."""
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [*extra_python_path(), env.get("PYTHONPATH", "")] if p
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=PLANNER_TIMEOUT_S, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def plan_in_this_environment(run: Any, kind: str = "EAGLE3") -> dict[str, Any]:
    """``plan --json`` with ``run``'s flags, told its pre-load free memory and (plugin) resident."""
    from harness.launch.engine import DEFAULT_CAPACITY_BYTES, server_args_to_cli
    from harness.reports.report_reading import pre_load_reading

    if run.memory is not None:
        memory = launched_memory(run)
        pre_load, resident = memory["pre_load_free_bytes"], memory.get("resident_bytes")
    else:
        pre_load, resident = pre_load_reading(run.report)["free_bytes"], None
    return run_planner([
        *PLAN_JSON, *server_args_to_cli(engine_kwargs(kind)),
        "--device-memory", str(DEFAULT_CAPACITY_BYTES),
        "--pre-load-free-bytes", str(pre_load),
        *(["--resident-bytes", str(resident)] if resident is not None else []),
    ])  # fmt: skip


def served_tokens(run: Any) -> int:
    return int(run.runner("target")["max_total_num_tokens"])


def assert_same_numbers(
    planned: Mapping[str, Any], memory: Mapping[str, Any], keys: tuple[str, ...] = PLAN_KEYS
) -> None:
    """Every ``keys`` number of the plan is the server's breakdown's."""
    pairs = {k: (planned.get(k), memory.get(k)) for k in keys}
    assert {k: pair for k, pair in pairs.items() if pair[0] != pair[1]} == {}, (planned, memory)


def assert_plan_equals_server(planned: Mapping[str, Any], run: Any) -> None:
    """Every :data:`PLAN_KEYS` number of the plan is the server's breakdown's."""
    assert_same_numbers(planned, launched_memory(run))
