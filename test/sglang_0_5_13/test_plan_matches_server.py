"""``sglang-specinit plan`` predicts what the patched server allocates."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness.checkpoints import eagle_drafts
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


def launch(
    target: Path, draft: Path, work: Path, *, plugin: bool, page_size: int
) -> tuple[int, dict | None]:
    """One EAGLE3 Engine on cpu: (its ``max_total_num_tokens``, the plugin's breakdown)."""
    with cpu_engine(
        target,
        draft_model_path=draft,
        algorithm="EAGLE3",
        plugin=plugin,
        capacity_bytes=CAPACITY,
        work_dir=work,
        page_size=page_size,
        extra_env={"SGLANG_SPECINIT_REPORT_DIR": str(work)},
    ) as engine:
        served_tokens = engine.server_info()["max_total_num_tokens"]
    return served_tokens, read_breakdown(work)


def plan(target: Path, draft: Path, live: dict, page_size: int) -> dict:
    """``sglang-specinit plan --json`` for the launch, told what the plugin server measured."""
    argv = [
        sys.executable, "-m", "sglang_specinit.planner.cli", "plan", "--json",
        "--model-path", str(target),
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", str(draft),
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
    return json.loads(result.stdout)


@dataclass(frozen=True)
class PluginRun:
    served_tokens: int
    live: dict
    planned: dict
    work: Path


def plugin_run(target: Path, draft: Path, work: Path, page_size: int) -> PluginRun:
    served, live = launch(target, draft, work, plugin=True, page_size=page_size)
    assert live is not None
    return PluginRun(served, live, plan(target, draft, live, page_size), work)


@pytest.fixture(scope="module")
def eagle3_page16(
    tiny_target: Path, tiny_eagle3_draft: Path, tmp_path_factory: pytest.TempPathFactory
) -> PluginRun:
    """The plugin-on EAGLE3 Engine at page 16 and the plan for it (read by two tests)."""
    return plugin_run(tiny_target, tiny_eagle3_draft, tmp_path_factory.mktemp("on16"), 16)


def assert_plan_equals_live(run: PluginRun) -> None:
    live, planned = run.live, run.planned
    assert live["tokens"] == run.served_tokens
    for key in COMPARED_KEYS:
        assert planned[key] == live[key], (key, planned[key], live[key])
    # What SGLang really allocated is what both predicted.
    assert live["allocated_target_kv_pool_bytes"] == planned["target_kv_pool_bytes"]
    assert live["allocated_draft_kv_pool_bytes"] == planned["draft_kv_pool_bytes"]

    # sglang-specinit report reads this server's file as written: planned next to allocated.
    (case,) = cases_from_paths([run.work])
    by_key = {v.key: v.breakdown for v in case.variants}
    assert by_key["rank0-planned"]["tokens"] == live["tokens"]
    assert (
        by_key["rank0-allocated"]["target_kv_pool_bytes"] == live["allocated_target_kv_pool_bytes"]
    )
    assert by_key["rank0-allocated"]["draft_kv_pool_bytes"] == live["allocated_draft_kv_pool_bytes"]
    assert "EAGLE3" in case.description


# Page 16 runs here in CI; page 1 is the fidelity matrix's (d) check on every recipe Engine.
def test_plan_equals_live_server(eagle3_page16: PluginRun) -> None:
    assert_plan_equals_live(eagle3_page16)


@pytest.mark.slow
def test_plan_equals_live_server_at_page_1(
    tiny_target: Path, tiny_eagle3_draft: Path, tmp_path: Path
) -> None:
    """Slow: CI runs page 16 above; page 1 is the fidelity matrix's (d) check."""
    assert_plan_equals_live(plugin_run(tiny_target, tiny_eagle3_draft, tmp_path, 1))


# The stock Engine holds the target's rotary cos/sin cache (a buffer no checkpoint stores) when
# it sizes the pool, and stock 0.5.13.post1's rule counts the target's resident bytes: the
# planner prices that buffer with SGLang's own rope factory (planner/target_buffers.py; 2432 x 16
# bf16 = 77,824 B here, 304 tokens). --resident-bytes measures the plugin run, whose draft is
# resident too, so it cannot stand for the target alone: the stock column is priced, not measured.
# num_nextn_predict_layers of the EAGLE3 draft: absent, 0 and 1. All slow: stock 0.5.13.post1
# reserves no draft KV whatever the key says; CI checks the plugin column against the plugin
# Engine (test above).
NNPL_CASES = [pytest.param(n, marks=pytest.mark.slow) for n in (None, 0, 1)]


@pytest.mark.parametrize("nnpl", NNPL_CASES)
def test_the_stock_column_is_the_stock_server(
    tiny_target: Path,
    tiny_eagle3_draft: Path,
    eagle3_page16: PluginRun,
    tmp_path: Path,
    nnpl: int | None,
) -> None:
    if nnpl is None:
        draft, run = tiny_eagle3_draft, eagle3_page16
    else:  # the draft with the key added
        draft = eagle_drafts.tiny_eagle3_draft(num_nextn_predict_layers=nnpl)
        run = plugin_run(tiny_target, draft, tmp_path / "on", 16)
    stock_tokens, breakdown = launch(
        tiny_target, draft, tmp_path / "off", plugin=False, page_size=16
    )
    assert breakdown is None  # stock sizing: the plugin wrote nothing
    assert run.planned["tokens"] == run.served_tokens
    column = run.planned["stock"]
    assert column["tokens"] == stock_tokens, (column["tokens"], stock_tokens)
