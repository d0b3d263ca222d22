"""STANDALONE (``StandaloneWorkerV2``) on the phased init, on real SGLang 0.5.13.post1 (cpu)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from harness.checkpoints import llama_family
from harness.checkpoints.llama_family import DEFAULT_STANDALONE_DRAFT, DEFAULT_TARGET
from harness.launch.engine import ENGINE_TEST_TIMEOUT_S
from harness.reports.report_reading import (
    F,
    checkpoint_bytes,
    kv_buffer_bytes,
    kv_spec,
    meter_budget,
    runner,
)
from test_workers_common import (
    CAPACITY,
    MIN_STOCK_OVERSHOOT,
    Launch,
    assert_fills_budget,
    assert_phased,
    assert_stock,
    launch_cache,
    predicted_plan,
    start_engine,
)

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S)]

ALGORITHM = "STANDALONE"


def _start(plugin: bool) -> Callable[[Path], Launch]:
    return lambda work_dir: start_engine(
        llama_family.tiny_llama_target(),
        draft=llama_family.tiny_standalone_draft(),
        algorithm=ALGORITHM,
        plugin=plugin,
        work_dir=work_dir,
    )


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Launch]:
    return launch_cache(tmp_path_factory, {"on": _start(True), "off": _start(False)})


def test_standalone_comes_up_through_the_four_phases(launch: Callable[[str], Launch]) -> None:
    run = launch("on")
    assert_phased(run, ALGORITHM)
    target, draft = runner(run.report, "target"), runner(run.report, "draft")
    assert (target["architecture"], draft["architecture"]) == ("LlamaForCausalLM",) * 2
    # Own KV buffers on the target's request table and allocator.
    assert draft["req_to_token_pool_id"] == target["req_to_token_pool_id"]
    assert draft["token_to_kv_pool_allocator_id"] == target["token_to_kv_pool_allocator_id"]
    assert draft["kv_pool"]["id"] != target["kv_pool"]["id"]


def test_pool_tokens_equal_the_independent_budget_prediction(
    launch: Callable[[str], Launch],
) -> None:
    run = launch("on")
    report, breakdown = run.report, run.breakdown
    assert breakdown is not None
    # The resident bytes the plugin sized with are exactly what the meter says SGLang measured.
    assert breakdown["resident_bytes"] == meter_budget(report).resident_bytes
    plan = predicted_plan(run, ALGORITHM, draft_kv_pools=(kv_spec(DEFAULT_STANDALONE_DRAFT),))
    tpool, dpool = runner(report, "target")["kv_pool"], runner(report, "draft")["kv_pool"]
    assert plan.tokens > 0
    assert tpool["size"] == dpool["size"] == plan.tokens == breakdown["tokens"]
    assert report["scheduler"]["max_total_num_tokens"] == plan.tokens
    # The draft pool has, and is priced at, its own geometry.
    shape = DEFAULT_STANDALONE_DRAFT
    assert (dpool["layer_num"], dpool["head_num"], dpool["head_dim"]) == (
        shape.layers,
        shape.kv_heads,
        shape.head_dim,
    )
    assert breakdown["draft_kv_bytes_per_token"] == shape.kv_bytes_per_token() == 96
    assert kv_buffer_bytes(dpool) == (plan.tokens + 1) * shape.kv_bytes_per_token()
    assert kv_buffer_bytes(tpool) == (plan.tokens + 1) * DEFAULT_TARGET.kv_bytes_per_token()
    assert breakdown["allocated_draft_kv_pool_bytes"] == kv_buffer_bytes(dpool)
    assert breakdown["allocated_target_kv_pool_bytes"] == kv_buffer_bytes(tpool)


def test_weights_and_kv_fill_the_budget_without_exceeding_it(
    launch: Callable[[str], Launch],
) -> None:
    assert_fills_budget(launch("on"), DEFAULT_STANDALONE_DRAFT)


def test_draft_weights_are_counted_in_full(launch: Callable[[str], Launch]) -> None:
    run = launch("on")
    report, breakdown = run.report, run.breakdown
    assert breakdown is not None
    draft_path = llama_family.tiny_standalone_draft()
    shape = DEFAULT_STANDALONE_DRAFT
    embed_and_head = 2 * shape.vocab * shape.hidden * shape.dtype_bytes
    own = checkpoint_bytes(draft_path)
    assert embed_and_head < own
    assert checkpoint_bytes(draft_path, lambda n: "embed_tokens" in n or "lm_head" in n) == (
        embed_and_head
    )
    # Nothing of the draft is shared with the target: every draft byte is charged.
    assert breakdown["draft_weight_bytes"] == runner(report, "draft")["weight_bytes"] >= own
    assert breakdown["target_weight_bytes"] == runner(report, "target")["weight_bytes"]
    # SGLang's own measurement at the target's profiling holds both models entirely.
    resident = meter_budget(report).resident_bytes
    assert resident >= breakdown["target_weight_bytes"] + breakdown["draft_weight_bytes"]


@pytest.mark.slow  # the stock contrast; CI keeps EAGLE3's (test_phased_eagle)
def test_plugin_off_reproduces_the_overshoot(launch: Callable[[str], Launch]) -> None:
    on, off = launch("on"), launch("off")
    assert_stock(off, ALGORITHM)
    target, draft = runner(off.report, "target"), runner(off.report, "draft")
    weights = target["weight_bytes"] + draft["weight_bytes"]
    pools = kv_buffer_bytes(target["kv_pool"]) + kv_buffer_bytes(draft["kv_pool"])
    # Stock sizes the target pool from the target alone; the draft lands on top.
    assert weights + pools > MIN_STOCK_OVERSHOOT * F * CAPACITY
    stock = meter_budget(off.report)
    assert stock.resident_bytes < target["weight_bytes"] + 64 * 1024
    assert kv_buffer_bytes(target["kv_pool"]) > stock.available_bytes - 64 * 1024
    assert target["kv_pool"]["size"] > runner(on.report, "target")["kv_pool"]["size"]
