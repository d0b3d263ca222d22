"""``sglang-specinit plan --sglang-version 0.5.23`` predicts what the patched 0.5.23 server
allocates, and its "stock 0.5.23" column what stock 0.5.23 allocates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sglang_specinit
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S, KINDS
from harness.launch.sglang_release import SGL_KERNEL_STUB_DIR

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TIMEOUT_S * 2)]

COMPARED_KEYS = (
    "tokens",
    "max_running_requests",
    "target_kv_bytes_per_token",
    "draft_kv_bytes_per_token",
    "target_kv_pool_bytes",
    "draft_kv_pool_bytes",
    "budget_bytes",
    "resident_bytes",
)


# The planner under test is this checkout's package, whichever checkout a venv installs.
PACKAGE_ROOT = str(Path(sglang_specinit.__file__).resolve().parents[1])
# The planner's environment -> (interpreter, extra environment).
PLANNER_ENVS = {
    "0.5.23": (
        lambda: sys.executable,
        {"PYTHONPATH": os.pathsep.join((PACKAGE_ROOT, str(SGL_KERNEL_STUB_DIR)))},
    ),
}


# One planner process per distinct command line in a session (~20 s each).
_plans: dict[tuple[str, ...], dict] = {}


def run_plan(
    live: dict, *extra: str, planner_env: str = "0.5.23", kind_name: str = "EAGLE3"
) -> dict:
    kind = KINDS[kind_name]
    python, extra_env = PLANNER_ENVS[planner_env]
    argv = [
        python(), "-m", "sglang_specinit.planner.cli", "plan", "--json",
        "--sglang-version", "0.5.23",
        "--model-path", str(kind.target()),
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", str(kind.draft()),
        "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4",
        "--mem-fraction-static", str(live["mem_fraction_static"]),
        "--device", "cpu",
        "--device-memory", str(256 << 20),
        "--pre-load-free-bytes", str(live["pre_load_free_bytes"]),
        *extra,
    ]  # fmt: skip
    # The planner process decides its own CPU-engine switch (cli._set_host_cpu_engine).
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("SGLANG_USE_CPU_ENGINE", "PYTHONPATH")},
        **extra_env,
    }
    if tuple(argv) not in _plans:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        _plans[tuple(argv)] = json.loads(result.stdout)
    return _plans[tuple(argv)]


@pytest.mark.parametrize("planner_env", list(PLANNER_ENVS))
@pytest.mark.launches(("EAGLE3", True))
def test_plan_equals_the_patched_0_5_23_server(engine_runs, planner_env: str) -> None:
    live = engine_runs("EAGLE3", True).memory
    planned = run_plan(
        live, "--resident-bytes", str(live["resident_bytes"]), planner_env=planner_env
    )
    assert planned["sglang_version"] == "0.5.23"
    for key in COMPARED_KEYS:
        assert planned[key] == live[key], (key, planned[key], live[key])
    assert planned["target_kv_pool_bytes"] == live["allocated_target_kv_pool_bytes"]
    assert planned["draft_kv_pool_bytes"] == live["allocated_draft_kv_pool_bytes"]


@pytest.mark.launches(("EAGLE3", False), ("EAGLE3", True))
def test_plan_stock_column_prices_the_draft_as_0_5_23_does(engine_runs) -> None:
    stock = engine_runs("EAGLE3", False)
    live = engine_runs("EAGLE3", True).memory
    stock_column = run_plan(live, "--resident-bytes", str(live["resident_bytes"]))["stock"]
    assert stock_column["priced_kv_bytes_per_token"] == stock.runner("target")["sglang_cell_size"]
    assert stock_column["draft_kv_bytes_per_token"] == 192  # what the draft really allocates


def served_tokens(run) -> int:
    return int(run.runner("target")["max_total_num_tokens"])


# (draft kind, the draft layers stock 0.5.23 reserves at the target's geometry): a draft
# without num_nextn_predict_layers (its layer count), with 0 (nothing), with 1 (the key).
STOCK_CASES = [
    ("EAGLE3", 1),
    ("EAGLE3-nnpl0", 0),
    # Slow: the EAGLE3 pair with one field added, the same reserve (CI: the EAGLE3 case).
    pytest.param("EAGLE3-nnpl1", 1, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("kind", "reserved"), STOCK_CASES)
@pytest.mark.launches(("{kind}", False), ("{kind}", True))
def test_stock_and_plugin_columns_are_the_servers(engine_runs, kind: str, reserved: int) -> None:
    stock, plugin = engine_runs(kind, False), engine_runs(kind, True)
    live = plugin.memory
    planned = run_plan(
        live, "--resident-bytes", str(live["resident_bytes"]), planner_env="0.5.23", kind_name=kind
    )
    assert stock.pre_load_free_bytes == plugin.pre_load_free_bytes == live["pre_load_free_bytes"]
    assert planned["tokens"] == served_tokens(plugin) == live["tokens"]
    column = planned["stock"]
    assert column["tokens"] == served_tokens(stock), (column["tokens"], served_tokens(stock))
    # The cell stock charged: the target's 2 layers of 128 B/token, one more per reserved layer.
    cell = stock.runner("target")["sglang_cell_size"]
    assert column["priced_kv_bytes_per_token"] == cell == 128 * (2 + reserved)
