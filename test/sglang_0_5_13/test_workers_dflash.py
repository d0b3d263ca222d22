"""DFLASH (``DFlashWorker``) on the phased init, real SGLang 0.5.13.post1 (cpu)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.checkpoints.eagle_drafts import DEFAULT_DFLASH_DRAFT, DFLASH_BLOCK_SIZE
from harness.checkpoints.llama_family import DEFAULT_TARGET
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

ALGORITHM = "DFLASH"
WINDOW = 2 * DFLASH_BLOCK_SIZE


def _start(plugin: bool, **overrides: object) -> Callable[[Path], Launch]:
    return lambda work_dir: start_engine(
        llama_family.tiny_llama_target(),
        draft=eagle_drafts.tiny_dflash_draft(),
        algorithm=ALGORITHM,
        plugin=plugin,
        work_dir=work_dir,
        num_steps=1,
        num_draft_tokens=DFLASH_BLOCK_SIZE,
        speculative_draft_attention_backend="triton",
        **overrides,
    )


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Launch]:
    return launch_cache(
        tmp_path_factory,
        {
            "on": _start(True),
            "off": _start(False),
            "window": _start(True, speculative_draft_window_size=WINDOW),
        },
    )


def stock_cell() -> int:
    """What 0.5.13.post1 charges per token: the target cell scaled by (T + D) / T (ceil)."""
    t, d = DEFAULT_TARGET.layers, DEFAULT_DFLASH_DRAFT.layers
    return -(-DEFAULT_TARGET.kv_bytes_per_token() * (t + d) // t)


@pytest.mark.parametrize("case", ["on", "window"])
def test_dflash_comes_up_through_the_four_phases(
    launch: Callable[[str], Launch], case: str
) -> None:
    run = launch(case)
    assert_phased(run, ALGORITHM)
    # SGLang's DFLASH argument hook forced the non-overlap scheduler.
    assert run.report["server_args"]["disable_overlap_schedule"] is True
    draft = runner(run.report, "draft")
    assert draft["architecture"] == "DFlashDraftModel"
    assert (
        draft["token_to_kv_pool_allocator_id"]
        == (runner(run.report, "target")["token_to_kv_pool_allocator_id"])
    )


@pytest.mark.parametrize("case", ["on", "window"])
def test_draft_pool_is_priced_at_its_own_geometry(
    launch: Callable[[str], Launch], case: str
) -> None:
    run = launch(case)
    report, breakdown = run.report, run.breakdown
    assert breakdown is not None
    assert breakdown["resident_bytes"] == meter_budget(report).resident_bytes
    plan = predicted_plan(run, ALGORITHM, draft_kv_pools=(kv_spec(DEFAULT_DFLASH_DRAFT),))
    tpool, dpool = runner(report, "target")["kv_pool"], runner(report, "draft")["kv_pool"]
    assert plan.tokens > 0
    assert tpool["size"] == dpool["size"] == plan.tokens == breakdown["tokens"]
    assert report["scheduler"]["max_total_num_tokens"] == plan.tokens
    shape = DEFAULT_DFLASH_DRAFT
    assert (dpool["layer_num"], dpool["head_num"], dpool["head_dim"]) == (
        shape.layers,
        shape.kv_heads,
        shape.head_dim,
    )
    # 128 + 128 B/token at the draft's geometry, not the (T + D) / T scaled target cell.
    target_cell, draft_cell = DEFAULT_TARGET.kv_bytes_per_token(), shape.kv_bytes_per_token()
    assert breakdown["draft_kv_bytes_per_token"] == draft_cell == 256
    assert breakdown["priced_kv_bytes_per_token"] == target_cell + draft_cell
    assert stock_cell() == 384 < target_cell + draft_cell
    assert kv_buffer_bytes(dpool) == (plan.tokens + 1) * draft_cell
    assert kv_buffer_bytes(dpool) == breakdown["allocated_draft_kv_pool_bytes"]
    assert kv_buffer_bytes(tpool) == breakdown["allocated_target_kv_pool_bytes"]


def test_weights_and_kv_fill_the_budget_without_exceeding_it(
    launch: Callable[[str], Launch],
) -> None:
    assert_fills_budget(launch("on"), DEFAULT_DFLASH_DRAFT)


def test_draft_weights_are_counted(launch: Callable[[str], Launch]) -> None:
    run = launch("on")
    report, breakdown = run.report, run.breakdown
    assert breakdown is not None
    own = checkpoint_bytes(eagle_drafts.tiny_dflash_draft())
    # DFLASH has no embedding/head of its own: nothing is shared, everything is charged.
    assert breakdown["draft_weight_bytes"] == runner(report, "draft")["weight_bytes"] >= own
    assert meter_budget(report).resident_bytes >= (
        breakdown["target_weight_bytes"] + breakdown["draft_weight_bytes"]
    )


def test_compact_window_gives_the_draft_a_private_request_table(
    launch: Callable[[str], Launch],
) -> None:
    on, window = launch("on"), launch("window")
    assert window.report["server_args"]["speculative_draft_window_size"] == WINDOW
    target, draft = runner(window.report, "target"), runner(window.report, "draft")
    assert draft["req_to_token_pool_id"] != target["req_to_token_pool_id"]
    # Without the window the draft aliases the target's table.
    assert (
        runner(on.report, "draft")["req_to_token_pool_id"]
        == (runner(on.report, "target")["req_to_token_pool_id"])
    )
    # Same KV index space and the same sizing: the window changes no pool.
    assert window.breakdown is not None and on.breakdown is not None
    assert window.breakdown["tokens"] == on.breakdown["tokens"]
    assert draft["kv_pool"]["size"] == target["kv_pool"]["size"] == window.breakdown["tokens"]


@pytest.mark.slow  # the stock contrast; CI keeps EAGLE3's (test_phased_eagle)
def test_plugin_off_reproduces_the_overshoot(launch: Callable[[str], Launch]) -> None:
    on, off = launch("on"), launch("off")
    assert_stock(off, ALGORITHM)
    target, draft = runner(off.report, "target"), runner(off.report, "draft")
    # Stock sized the target pool from the target's weights alone, at the scaled target cell.
    stock = meter_budget(off.report)
    assert target["kv_pool"]["size"] == stock.available_bytes // stock_cell()
    weights = target["weight_bytes"] + draft["weight_bytes"]
    pools = kv_buffer_bytes(target["kv_pool"]) + kv_buffer_bytes(draft["kv_pool"])
    assert weights + pools > MIN_STOCK_OVERSHOOT * F * CAPACITY
    assert target["kv_pool"]["size"] > runner(on.report, "target")["kv_pool"]["size"]
