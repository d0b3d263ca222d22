"""One live launch on the real sglang 0.5.21: the tiny EAGLE3 pair, plugin on, as a real
``sglang.Engine`` on device cpu (:mod:`harness.launch.launch_0_5_23`, kind ``EAGLE3``: target 2
layers x 2 KV heads x dim 16, an EAGLE3 draft with a reduced vocabulary).

The 0.5.21 Engine comes up with the plugin's sizing (the ``SPECINIT_MEMORY`` breakdown, not
stock's, with its rank fields read through ``release_shims.scheduler_ranks``), weights + every
pool fill the budget to [0.995, 1], and ``sglang-specinit plan --resident-bytes`` in this
environment (0.5.21's own server-args logic and pool code) plans what the server allocated.

Slow (``SPECINIT_TEST_SLOW=1``; the Engine ~75 s here, the planner ~25 s). What covers it in CI:
the same launch on the next release of this API generation
(``test/sglang_0_5_22/test_eagle3_launch.py``), and every hook target, required attribute and
0.5.21 difference checked on the real 0.5.21 wheel (``test_adapter_signatures.py`` here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from harness.launch.engine import DEFAULT_CAPACITY_BYTES, cpu_engine_kwargs, server_args_to_cli
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S, KINDS, launch_overrides
from harness.launch.sglang_release import SGL_KERNEL_STUB_DIR

pytestmark = [
    pytest.mark.slow,
    pytest.mark.cpu_engine,
    pytest.mark.timeout(ENGINE_TIMEOUT_S * 2),
]

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


def eagle3_kwargs() -> dict[str, Any]:
    """The Engine kwargs :mod:`harness.launch.launch_0_5_23` starts ``EAGLE3`` with."""
    spec = KINDS["EAGLE3"]
    return cpu_engine_kwargs(
        spec.target(),
        draft_model_path=spec.draft(),
        algorithm=spec.algorithm,
        **launch_overrides(spec),
    )


def test_the_0_5_21_engine_fills_the_budget(eagle3_on: Any) -> None:
    memory = eagle3_on.memory
    assert memory is not None, eagle3_on.log[-3000:]
    assert eagle3_on.report["specinit_loaded"]
    assert memory["sglang_version"] == "0.5.21"
    # Every label names the installed release (compat.installed_sglang_version), none 0.5.23.
    assert "[specinit] KV pools on sglang 0.5.21 (" in eagle3_on.log
    assert "sglang 0.5.23" not in eagle3_on.log
    budget = int(eagle3_kwargs()["mem_fraction_static"] * eagle3_on.pre_load_free_bytes)
    assert memory["budget_bytes"] == budget
    # Weights as SGLang measured them when it profiled, plus every pool's token buffers as
    # allocated (read from the tensors, not from sglang_specinit).
    pools = sum(p.get("token_buffer_bytes", 0) for p in eagle3_on.report["kv_pool_buffers"])
    used = eagle3_on.resident_at_profile + pools + memory.get("draft_request_bytes", 0)
    assert 0.995 <= used / budget <= 1, (used, budget)
    assert memory["target_kv_pool_bytes"] == memory["allocated_target_kv_pool_bytes"]
    assert memory["draft_kv_pool_bytes"] == memory["allocated_draft_kv_pool_bytes"]


def test_plan_in_the_0_5_21_environment_equals_the_server(eagle3_on: Any) -> None:
    memory = eagle3_on.memory
    assert memory is not None, eagle3_on.log[-3000:]
    argv = [
        sys.executable, "-m", "sglang_specinit.planner.cli", "plan", "--json",
        *server_args_to_cli(eagle3_kwargs()),
        "--device-memory", str(DEFAULT_CAPACITY_BYTES),
        "--pre-load-free-bytes", str(memory["pre_load_free_bytes"]),
        "--resident-bytes", str(memory["resident_bytes"]),
    ]  # fmt: skip
    # A shell set up for CPU tests, as test_planner_0523's: the planner builds its pricing
    # pools on cpu with 0.5.21's pool code, whose modules import sgl_kernel's CPU op.
    python_path = [str(SGL_KERNEL_STUB_DIR), os.environ.get("PYTHONPATH", "")]
    env = {
        **os.environ,
        "SGLANG_USE_CPU_ENGINE": "1",
        "PYTHONPATH": os.pathsep.join(p for p in python_path if p),
    }
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    planned = json.loads(done.stdout)
    # The stock column is this release's own configurator, labelled as such.
    assert planned["sglang_version"] == "0.5.21"
    assert "stock_0_5_21" in planned and "stock_0_5_23" not in planned
    differing = {
        key: (planned.get(key), memory.get(key))
        for key in PLAN_KEYS
        if planned.get(key) != memory.get(key)
    }
    assert differing == {}
