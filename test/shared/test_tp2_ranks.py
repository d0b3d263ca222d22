"""The tiny pair at TP 2 on device cpu, rank 1's device 24 MiB smaller (two real scheduler ranks,
plugin on), and with dp-attention over both ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness.checkpoints.eagle_drafts import TP2_EAGLE3_DRAFT
from harness.checkpoints.llama_family import DEFAULT_TARGET
from harness.launch.engine import server_args_to_cli
from harness.launch.release_suite import run_planner
from harness.launch.tp2_pair import (
    CAPACITY,
    MULTI_RANK_TIMEOUT_S,
    PER_TOKEN_ON_RANK,
    TIGHT_CAPACITY,
    TP,
    RankedLaunch,
    assert_half_of_every_kv_head_set,
    assert_plan_equals_ranks,
    own_budget,
    own_free_at_profile,
    own_pre_load_free,
    planner_argv,
    pools_and_resident,
    rank_plan,
    start_tp2,
)
from harness.matrices.fidelity_probe import PHASES_ITSELF
from harness.matrices.plan_verdicts import VERDICT_PROPERTY
from harness.releases import installed_row
from harness.reports.report_reading import F, runner
from sglang_specinit import rank_reports

pytestmark = [
    pytest.mark.cpu_engine,
    pytest.mark.multi_rank,
    pytest.mark.timeout(MULTI_RANK_TIMEOUT_S),
]

ROW = installed_row()
# dp-attention over the two ranks.
DP_ATTENTION = {"dp_size": 2, "enable_dp_attention": True} if PHASES_ITSELF else {"attn_dp_size": 2}


def plan_of(report: dict, run: RankedLaunch) -> object:
    if PHASES_ITSELF:
        return rank_plan(report, run.breakdown(1)["draft_weight_bytes"], with_requests=True)
    return rank_plan(report)


@pytest.fixture(scope="module", name="run")
def asymmetric(tmp_path_factory: pytest.TempPathFactory) -> RankedLaunch:
    return start_tp2(tmp_path_factory.mktemp("tp2-asymmetric"), (CAPACITY, TIGHT_CAPACITY))


def test_each_rank_sizes_and_fits_the_tightest_and_says_whether_it_is_the_tightest(
    run: RankedLaunch,
) -> None:
    assert_half_of_every_kv_head_set(run)
    for tp_rank, report in run.reports.items():
        assert report["meter"]["capacity_bytes"] == (CAPACITY, TIGHT_CAPACITY)[tp_rank]
        if not PHASES_ITSELF:
            # The shim bound each scheduler's meter to the device the launcher published.
            assert report["meter"]["gpu_id"] == tp_rank
        phases = [f"TP{tp_rank}] [specinit] phase {phase}/4" for phase in range(1, 5)]
        pools = [f"TP{tp_rank}] [specinit] KV pools on sglang {ROW.name} (rank {tp_rank} "]
        for line in phases if PHASES_ITSELF else pools:
            assert line in run.log, line

    # Every rank sizes the token count of the tightest rank.
    roomy, tight = run.reports[0], run.reports[1]
    counts = {r["scheduler"]["max_total_num_tokens"] for r in run.reports.values()}
    assert counts == {run.served_tokens}, counts
    # The tight rank's own readings predict exactly the count every rank sized ...
    assert plan_of(tight, run).tokens == run.served_tokens
    # ... while the roomy rank alone would have sized about 24 MiB x f worth of tokens more.
    extra = plan_of(roomy, run).tokens - run.served_tokens
    assert extra == pytest.approx(F * (CAPACITY - TIGHT_CAPACITY) / PER_TOKEN_ON_RANK, rel=0.01)
    for report in run.reports.values():
        for role in ("target", "draft"):
            assert runner(report, role)["kv_pool"]["size"] == run.served_tokens

    # The budget holds against the tight rank's own free memory before loading, full to a token.
    tight_budget = own_budget(tight).budget_bytes
    used = pools_and_resident(tight)
    assert used <= tight_budget
    assert tight_budget - used < PER_TOKEN_ON_RANK, (tight_budget, used)
    # The roomy rank holds the same pools with its extra 24 MiB x f unused.
    roomy_slack = own_budget(roomy).budget_bytes - pools_and_resident(roomy)
    assert roomy_slack == pytest.approx(F * (CAPACITY - TIGHT_CAPACITY), rel=0.01)
    # Each rank's process really holds what it was given, within its own device.
    for report in (tight, roomy):
        assert report["meter"]["used_bytes"] <= report["meter"]["capacity_bytes"]
    assert own_pre_load_free(tight) < own_pre_load_free(roomy)

    assert run.breakdown_files == ["memory-rank0-pp0-tp0-dp0.json", "memory-rank1-pp0-tp1-dp0.json"]
    roomy, tight = run.breakdown(0), run.breakdown(1)
    assert (roomy["rank_index"], tight["rank_index"]) == (0, 1)
    assert {b["tokens"] for b in run.breakdowns} == {run.served_tokens}
    if not PHASES_ITSELF:
        # Each rank's free memory at sizing is its own reading where SGLang profiled; the
        # minimum is the tight rank's (SGLang's MIN all-reduce, recovered without another
        # collective).
        for tp_rank, b in enumerate((roomy, tight)):
            assert b["rank_free_at_sizing_bytes"] == own_free_at_profile(run.reports[tp_rank])
            assert b["min_free_at_sizing_bytes"] == pytest.approx(
                own_free_at_profile(run.reports[1]), abs=2
            )
    assert tight["tightest_rank"] is True and roomy["tightest_rank"] is False
    assert roomy["free_above_tightest_bytes"] == pytest.approx(CAPACITY - TIGHT_CAPACITY, abs=64)
    assert rank_reports.tightest(run.breakdowns)["tp_rank"] == 1
    # Each rank's summary line, from data that rank already had (no added collective).
    assert "TP1] [specinit] rank 1 (pp0 tp1 dp0) is the tightest rank" in run.log
    assert "TP0] [specinit] rank 0 (pp0 tp0 dp0) is not the tightest rank: 24.00 MiB" in run.log
    # The JSON log lines carry the same dicts as the files.
    logged = [json.loads(ln.split("\n", 1)[0]) for ln in run.log.split("SPECINIT_MEMORY ")[1:]]
    assert sorted(logged, key=lambda b: b["rank_index"]) == run.breakdowns


def test_plan_tp2_equals_what_both_ranks_allocate(
    run: RankedLaunch, request: pytest.FixtureRequest
) -> None:
    planned = run_planner(
        planner_argv(run.breakdown(1), "--tp", str(TP), device_memory=TIGHT_CAPACITY)
    )
    # run_planner held plan to exit 0 (a plan), and the launch started: one row of the table.
    request.node.user_properties.append((VERDICT_PROPERTY, ("eagle3-pair-tp2", "starts", "starts")))
    assert_plan_equals_ranks(planned, run)
    assert planned["tp_size"] == TP


@pytest.mark.slow
def test_dp_attention_dp2_tp2_sizes_full_kv_heads_on_both_ranks(tmp_path: Path) -> None:
    run = start_tp2(tmp_path, **DP_ATTENTION)
    assert run.breakdown_files == ["memory-rank0-pp0-tp0-dp0.json", "memory-rank1-pp0-tp1-dp1.json"]
    for report in run.reports.values():
        for role, shape in (("target", DEFAULT_TARGET), ("draft", TP2_EAGLE3_DRAFT)):
            pool = runner(report, role)["kv_pool"]
            assert (pool["head_num"], pool["head_dim"]) == (shape.kv_heads, shape.head_dim)
            assert pool["size"] == run.served_tokens
    assert {b["tokens"] for b in run.breakdowns} == {run.served_tokens}
    assert sum(b["tightest_rank"] for b in run.breakdowns) >= 1
    layout = ("--tp", str(TP), *server_args_to_cli(DP_ATTENTION))
    # Llama's attention stays on the full TP group; the EAGLE3 draft is whole on each rank;
    # the target's rotary cos/sin cache (no checkpoint stores it) is whole on each rank.
    planned = run_planner(planner_argv(run.breakdown(1), *layout, device_memory=CAPACITY))
    assert_plan_equals_ranks(planned, run)
