"""STANDALONE (``StandaloneWorkerV2``) and DFLASH (``DFlashWorker``) drafts of the tiny Llama
target, each with a KV geometry of its own, on the phased init, real SGLang 0.5.13.post1 (cpu)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.checkpoints.eagle_drafts import DEFAULT_DFLASH_DRAFT, DFLASH_BLOCK_SIZE
from harness.checkpoints.llama_family import DEFAULT_STANDALONE_DRAFT, DEFAULT_TARGET
from harness.checkpoints.llama_layout import TinyLlamaShape
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
    assert_pools_as_planned,
    assert_stock,
    launch_cache,
    predicted_plan,
    start_engine,
)

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S)]

WINDOW = 2 * DFLASH_BLOCK_SIZE


@dataclass(frozen=True)
class Draft:
    """One draft's launch and what the tests expect of it."""

    algorithm: str
    shape: TinyLlamaShape
    make: Callable[[], Path]
    architecture: str
    draft_cell: int  # its KV bytes per token, from its geometry
    embed_and_head_bytes: int  # of its own checkpoint (0: it has none)
    overlap_disabled: bool  # by SGLang's argument hook for the algorithm
    flags: dict[str, Any] = field(default_factory=dict)


DFLASH_FLAGS = {
    "num_steps": 1,
    "num_draft_tokens": DFLASH_BLOCK_SIZE,
    "speculative_draft_attention_backend": "triton",
}
STANDALONE = DEFAULT_STANDALONE_DRAFT
DRAFTS = {
    "STANDALONE": Draft(
        "STANDALONE",
        STANDALONE,
        llama_family.tiny_standalone_draft,
        "LlamaForCausalLM",
        draft_cell=96,
        embed_and_head_bytes=2 * STANDALONE.vocab * STANDALONE.hidden * STANDALONE.dtype_bytes,
        overlap_disabled=False,
    ),
    "DFLASH": Draft(
        "DFLASH",
        DEFAULT_DFLASH_DRAFT,
        eagle_drafts.tiny_dflash_draft,
        "DFlashDraftModel",
        draft_cell=256,
        embed_and_head_bytes=0,
        overlap_disabled=True,
        flags=DFLASH_FLAGS,
    ),
}
DRAFTS["DFLASH-window"] = replace(
    DRAFTS["DFLASH"], flags={**DFLASH_FLAGS, "speculative_draft_window_size": WINDOW}
)
# The stock contrasts; CI keeps EAGLE3's (test_phased_eagle).
STOCK_CASES = [pytest.param(name, marks=pytest.mark.slow) for name in ("STANDALONE", "DFLASH")]


def _start(name: str, plugin: bool, work_dir: Path) -> Launch:
    draft = DRAFTS[name]
    return start_engine(
        llama_family.tiny_llama_target(),
        draft=draft.make(),
        algorithm=draft.algorithm,
        plugin=plugin,
        work_dir=work_dir,
        **draft.flags,
    )


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Launch]:
    starters = {name: functools.partial(_start, name, True) for name in DRAFTS}
    starters |= {f"{name}-off": functools.partial(_start, name, False) for name in DRAFTS}
    return launch_cache(tmp_path_factory, starters)


def dflash_stock_cell() -> int:
    """What 0.5.13.post1 charges a DFLASH token: the target cell scaled by (T + D) / T (ceil)."""
    t, d = DEFAULT_TARGET.layers, DEFAULT_DFLASH_DRAFT.layers
    return -(-DEFAULT_TARGET.kv_bytes_per_token() * (t + d) // t)


@pytest.mark.parametrize("name", DRAFTS)
def test_the_draft_comes_up_through_the_four_phases(
    launch: Callable[[str], Launch], name: str
) -> None:
    run, draft = launch(name), DRAFTS[name]
    assert_phased(run, draft.algorithm)
    assert run.report["server_args"]["disable_overlap_schedule"] is draft.overlap_disabled
    target, draft_runner = runner(run.report, "target"), runner(run.report, "draft")
    assert (target["architecture"], draft_runner["architecture"]) == (
        "LlamaForCausalLM",
        draft.architecture,
    )
    # Own KV buffers on the target's allocator.
    assert draft_runner["token_to_kv_pool_allocator_id"] == target["token_to_kv_pool_allocator_id"]
    assert draft_runner["kv_pool"]["id"] != target["kv_pool"]["id"]


@pytest.mark.parametrize("name", DRAFTS)
def test_pool_tokens_equal_the_independent_budget_prediction(
    launch: Callable[[str], Launch], name: str
) -> None:
    run, draft = launch(name), DRAFTS[name]
    report, breakdown = run.report, run.breakdown
    assert breakdown is not None
    # The resident bytes the plugin sized with are exactly what the meter says SGLang measured.
    assert breakdown["resident_bytes"] == meter_budget(report).resident_bytes
    plan = predicted_plan(run, draft.algorithm, draft_kv_pools=(kv_spec(draft.shape),))
    assert_pools_as_planned(run, plan, draft.shape)
    assert breakdown["draft_kv_bytes_per_token"] == draft.draft_cell
    if draft.algorithm == "DFLASH":
        # 128 + 128 B/token at the draft's geometry, not the (T + D) / T scaled target cell.
        assert dflash_stock_cell() == 384 < breakdown["priced_kv_bytes_per_token"]


@pytest.mark.parametrize("name", ["STANDALONE", "DFLASH"])
def test_weights_and_kv_fill_the_budget_without_exceeding_it(
    launch: Callable[[str], Launch], name: str
) -> None:
    assert_fills_budget(launch(name), DRAFTS[name].shape)


@pytest.mark.parametrize("name", ["STANDALONE", "DFLASH"])
def test_draft_weights_are_counted_in_full(launch: Callable[[str], Launch], name: str) -> None:
    run, draft = launch(name), DRAFTS[name]
    report, breakdown = run.report, run.breakdown
    assert breakdown is not None
    draft_path = draft.make()
    own = checkpoint_bytes(draft_path)
    assert draft.embed_and_head_bytes < own
    assert checkpoint_bytes(draft_path, lambda n: "embed_tokens" in n or "lm_head" in n) == (
        draft.embed_and_head_bytes
    )
    # Nothing of the draft is shared with the target: every draft byte is charged.
    assert breakdown["draft_weight_bytes"] == runner(report, "draft")["weight_bytes"] >= own
    assert breakdown["target_weight_bytes"] == runner(report, "target")["weight_bytes"]
    # SGLang's own measurement at the target's profiling holds both models entirely.
    resident = meter_budget(report).resident_bytes
    assert resident >= breakdown["target_weight_bytes"] + breakdown["draft_weight_bytes"]


def test_compact_window_gives_the_dflash_draft_a_private_request_table(
    launch: Callable[[str], Launch],
) -> None:
    on, window = launch("DFLASH"), launch("DFLASH-window")
    assert window.report["server_args"]["speculative_draft_window_size"] == WINDOW
    target, draft = runner(window.report, "target"), runner(window.report, "draft")
    assert draft["req_to_token_pool_id"] != target["req_to_token_pool_id"]
    # Without the window the draft aliases the target's table (as STANDALONE's does).
    for name in ("DFLASH", "STANDALONE"):
        report = launch(name).report
        assert (
            runner(report, "draft")["req_to_token_pool_id"]
            == (runner(report, "target")["req_to_token_pool_id"])
        )
    # Same KV index space and the same sizing: the window changes no pool.
    assert window.breakdown is not None and on.breakdown is not None
    assert window.breakdown["tokens"] == on.breakdown["tokens"]
    assert draft["kv_pool"]["size"] == target["kv_pool"]["size"] == window.breakdown["tokens"]


@pytest.mark.parametrize("name", STOCK_CASES)
def test_plugin_off_reproduces_the_overshoot(launch: Callable[[str], Launch], name: str) -> None:
    on, off, draft = launch(name), launch(f"{name}-off"), DRAFTS[name]
    assert_stock(off, draft.algorithm)
    target, draft_runner = runner(off.report, "target"), runner(off.report, "draft")
    weights = target["weight_bytes"] + draft_runner["weight_bytes"]
    pools = kv_buffer_bytes(target["kv_pool"]) + kv_buffer_bytes(draft_runner["kv_pool"])
    # Stock sizes the target pool from the target alone; the draft lands on top.
    assert weights + pools > MIN_STOCK_OVERSHOOT * F * CAPACITY
    stock = meter_budget(off.report)
    assert stock.resident_bytes < target["weight_bytes"] + 64 * 1024
    if draft.algorithm == "DFLASH":
        assert target["kv_pool"]["size"] == stock.available_bytes // dflash_stock_cell()
    else:
        assert kv_buffer_bytes(target["kv_pool"]) > stock.available_bytes - 64 * 1024
    assert target["kv_pool"]["size"] > runner(on.report, "target")["kv_pool"]["size"]
