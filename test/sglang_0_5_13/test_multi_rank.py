"""TP 2 on device cpu on 0.5.13.post1, beyond the asymmetric launch every generation runs
(``test/shared/test_tp2_ranks.py``): the same tiny pair (:mod:`harness.launch.tp2_pair`) through
``sglang.Engine`` plugin on and off (the stock contrast), dp-attention, and PP 2 with a draft,
which SGLang itself refuses (checked on its own argument check, without a launch)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.checkpoints.eagle_drafts import TP2_EAGLE3_DRAFT
from harness.checkpoints.llama_family import DEFAULT_TARGET
from harness.launch.engine import cpu_engine_kwargs
from harness.launch.tp2_pair import (
    ALGORITHM,
    CAPACITY,
    MULTI_RANK_TIMEOUT_S,
    SPEC_FLAGS,
    TP,
    RankedLaunch,
    assert_half_of_every_kv_head_set,
    assert_plan_equals_ranks,
    own_budget,
    planner_argv,
    pools_and_resident,
    run_planner,
    start_tp2,
)
from harness.reports.report_reading import F, kv_buffer_bytes, runner
from test_workers_common import launch_cache

pytestmark = [
    pytest.mark.cpu_engine,
    pytest.mark.multi_rank,
    pytest.mark.timeout(MULTI_RANK_TIMEOUT_S),
]

LAUNCHES = {
    "engine-on": functools.partial(start_tp2, launcher="engine", plugin=True),
    "engine-off": functools.partial(start_tp2, launcher="engine", plugin=False),
}


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], RankedLaunch]:
    return launch_cache(tmp_path_factory, LAUNCHES)


@pytest.mark.slow
def test_both_engine_ranks_hold_half_of_every_kv_head_set(
    launch: Callable[[str], RankedLaunch],
) -> None:
    run = launch("engine-on")
    assert_half_of_every_kv_head_set(run)
    for rank in range(TP):
        for phase in range(1, 5):
            assert f"TP{rank}] [specinit] phase {phase}/4" in run.log, (rank, phase)


@pytest.mark.slow
def test_stock_tp2_overshoots_on_every_rank_and_the_plugin_does_not(
    launch: Callable[[str], RankedLaunch],
) -> None:
    stock, phased = launch("engine-off"), launch("engine-on")
    assert stock.breakdowns == [] and "[specinit] phase" not in stock.log
    for report in stock.reports.values():
        assert not report["specinit_loaded"]
        # Stock sized the target pool before the draft existed; the draft lands on top.
        weights = runner(report, "target")["weight_bytes"] + runner(report, "draft")["weight_bytes"]
        pools = kv_buffer_bytes(runner(report, "target")["kv_pool"]) + kv_buffer_bytes(
            runner(report, "draft")["kv_pool"]
        )
        assert weights + pools > F * CAPACITY * 1.01
    for report in phased.reports.values():
        assert pools_and_resident(report) <= own_budget(report).budget_bytes
    assert phased.served_tokens < stock.served_tokens


@pytest.mark.slow
def test_dp_attention_dp2_tp2_sizes_full_kv_heads_on_both_ranks(tmp_path: Path) -> None:
    run = start_tp2(tmp_path, dp_size=2, enable_dp_attention=True)
    assert run.breakdown_files == ["memory-rank0-pp0-tp0-dp0.json", "memory-rank1-pp0-tp1-dp1.json"]
    for report in run.reports.values():
        for role, shape in (("target", DEFAULT_TARGET), ("draft", TP2_EAGLE3_DRAFT)):
            pool = runner(report, role)["kv_pool"]
            assert (pool["head_num"], pool["head_dim"]) == (shape.kv_heads, shape.head_dim)
            assert pool["size"] == run.served_tokens
    layout = ("--tp", "2", "--dp-size", "2", "--enable-dp-attention")
    planned = run_planner(planner_argv(run.breakdown(1), *layout, device_memory=CAPACITY))
    assert {b["tokens"] for b in run.breakdowns} == {planned["tokens"], run.served_tokens}
    # Llama's attention stays on the full TP group; the EAGLE3 draft is whole on each rank;
    # the target's rotary cos/sin cache (no checkpoint stores it) is whole on each rank.
    assert_plan_equals_ranks(planned, run)


PP_REFUSAL = "Pipeline parallelism is not compatible with overlap schedule, speculative decoding"


def _check_server_args(**kwargs: Any) -> tuple[bool, str | None]:
    """0.5.13.post1's ``ServerArgs(**kwargs).check_server_args()`` in this process, as the
    launcher runs it: (the overlap-schedule switch it settled on, the refusal or None)."""
    from sglang.srt.server_args import ServerArgs

    saved = dict(os.environ)
    try:
        args = ServerArgs(**kwargs)
        try:
            args.check_server_args()
        except AssertionError as exc:
            return args.disable_overlap_schedule, str(exc)
        return args.disable_overlap_schedule, None
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_pp2_with_a_draft_is_refused_by_sglang_before_any_rank_starts() -> None:
    target = llama_family.tiny_llama_target()
    assert _check_server_args(**cpu_engine_kwargs(target, pp_size=2)) == (True, None)
    with_draft = cpu_engine_kwargs(
        target,
        draft_model_path=eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
        algorithm=ALGORITHM,
        pp_size=2,
        **SPEC_FLAGS,
    )
    assert _check_server_args(**with_draft) == (True, PP_REFUSAL)
