"""``sglang-specinit plan`` predicts what the patched server allocates.

A patched EAGLE3 Engine (draft with a KV geometry unlike the target's) comes up on CPU; then the
planner is run on the same checkpoints and flags, told the two numbers only the device knows (free
memory before loading, bytes resident when the pools were sized). The planner derives the KV
specs from ``ModelConfig`` and the checkpoints, the server from live runners: the token counts,
per-token costs and pool sizes must be identical.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness.launch.engine import ENGINE_TEST_TIMEOUT_S, cpu_engine
from harness.reports.report_reading import read_breakdown
from sglang_specinit.planner.report_cases import cases_from_paths

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S)]

CAPACITY = 64 << 20
SPEC_FLAGS = {
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}
COMPARED_KEYS = (
    "tokens",
    "max_running_requests",
    "target_kv_bytes_per_token",
    "draft_kv_bytes_per_token",
    "target_kv_pool_bytes",
    "draft_kv_pool_bytes",
    "budget_bytes",
    "min_viable_mem_fraction_static",
)


# Page 1 is the fidelity matrix's (d) check on every recipe Engine; page 16 runs here in CI.
@pytest.mark.parametrize("page_size", [pytest.param(1, marks=pytest.mark.slow), 16])
def test_plan_equals_live_server(
    tiny_target: Path, tiny_eagle3_draft: Path, tmp_path: Path, page_size: int
) -> None:
    with cpu_engine(
        tiny_target,
        draft_model_path=tiny_eagle3_draft,
        algorithm="EAGLE3",
        plugin=True,
        capacity_bytes=CAPACITY,
        work_dir=tmp_path,
        page_size=page_size,
        extra_env={"SGLANG_SPECINIT_REPORT_DIR": str(tmp_path)},
    ) as engine:
        served_tokens = engine.server_info()["max_total_num_tokens"]
    live = read_breakdown(tmp_path)
    assert live is not None
    assert live["tokens"] == served_tokens

    argv = [
        sys.executable, "-m", "sglang_specinit.planner.cli", "plan", "--json",
        "--model-path", str(tiny_target),
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", str(tiny_eagle3_draft),
        "--speculative-num-steps", str(SPEC_FLAGS["speculative_num_steps"]),
        "--speculative-eagle-topk", str(SPEC_FLAGS["speculative_eagle_topk"]),
        "--speculative-num-draft-tokens", str(SPEC_FLAGS["speculative_num_draft_tokens"]),
        "--mem-fraction-static", str(live["mem_fraction_static"]),
        "--page-size", str(page_size),
        "--device", "cpu",
        "--device-memory", str(CAPACITY),
        "--pre-load-free-bytes", str(live["pre_load_free_bytes"]),
        "--resident-bytes", str(live["resident_bytes"]),
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    planned = json.loads(result.stdout)
    for key in COMPARED_KEYS:
        assert planned[key] == live[key], (key, planned[key], live[key])
    # What SGLang really allocated is what both predicted.
    assert live["allocated_target_kv_pool_bytes"] == planned["target_kv_pool_bytes"]
    assert live["allocated_draft_kv_pool_bytes"] == planned["draft_kv_pool_bytes"]

    # sglang-specinit report reads this server's file as written: planned next to allocated.
    (case,) = cases_from_paths([tmp_path])
    by_key = {v.key: v.breakdown for v in case.variants}
    assert by_key["rank0-planned"]["tokens"] == live["tokens"]
    assert (
        by_key["rank0-allocated"]["target_kv_pool_bytes"] == live["allocated_target_kv_pool_bytes"]
    )
    assert by_key["rank0-allocated"]["draft_kv_pool_bytes"] == live["allocated_draft_kv_pool_bytes"]
    assert "EAGLE3" in case.description
