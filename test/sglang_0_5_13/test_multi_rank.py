"""TP 2 on device cpu: two real scheduler ranks on SGLang's own gloo groups.

A tiny Llama target (2 KV heads of dim 16) and an EAGLE3 draft of its own KV geometry (2 KV heads
of dim 48) whose KV heads both split across the two ranks, launched through ``launch_server``
and ``sglang.Engine`` with the plugin on and off. Two CPU test doubles make TP 2 possible here
(``harness.cpu_doubles.shims``: pynccl off on device cpu; one simulated device per rank) plus
SGLang's own ``SGLANG_CPU_OMP_THREADS_BIND=0|1``.

The asymmetric launch gives rank 1 a device 24 MiB smaller than rank 0's. SGLang sizes from an
all-rank minimum (a MIN all-reduce it does anyway), so every rank must size the same token count,
the one rank 1 can afford, and the budget must hold on rank 1. Every wait is bounded; a hang
fails with each rank's last log lines (``harness.launch.multi_rank``).

Expected token counts are recomputed here from the checkpoints' geometry divided over the ranks
and each rank's own meter readings, never read back from the plugin.

PP 2 with a draft is refused by SGLang itself; that refusal is checked on its own argument check,
without a launch.

Timing (2 cores): a TP 2 launch takes 60-90 s unloaded, 3 min on a loaded machine; the module
launches three (one of them ``slow``), cached across its tests.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.checkpoints.eagle_drafts import TP2_EAGLE3_DRAFT
from harness.checkpoints.llama_family import DEFAULT_TARGET
from harness.cpu_doubles.shims import PER_DEVICE_CAPACITY_ENV
from harness.launch.engine import cpu_engine, cpu_engine_kwargs, cpu_server
from harness.reports.report_reading import (
    REPORT_DIR_ENV,
    F,
    kv_buffer_bytes,
    kv_spec,
    meter_budget,
    pre_load_reading,
    runner,
)
from sglang_specinit import budget, rank_reports
from test_workers_common import launch_cache

MULTI_RANK_TIMEOUT_S = 900
STARTUP_BOUND_S = 600.0
pytestmark = [
    pytest.mark.cpu_engine,
    pytest.mark.multi_rank,
    pytest.mark.timeout(MULTI_RANK_TIMEOUT_S),
]

TP = 2
CAPACITY = 256 << 20
# 24 MiB less on rank 1: 232 / 256 = 0.906, inside SGLang's own 10 % TP imbalance check
# (model_runner.py raises below 0.9 when SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK is on).
TIGHT_CAPACITY = CAPACITY - (24 << 20)
ALGORITHM = "EAGLE3"
SPEC_FLAGS = {"speculative_num_steps": 3, "speculative_eagle_topk": 1}
# What one rank holds of each model's KV: half the KV heads.
TARGET_ON_RANK = replace(DEFAULT_TARGET, kv_heads=DEFAULT_TARGET.kv_heads // TP)
DRAFT_ON_RANK = replace(TP2_EAGLE3_DRAFT, kv_heads=TP2_EAGLE3_DRAFT.kv_heads // TP)


@dataclass
class RankedLaunch:
    """What one multi-rank launch left behind: per-rank reports, breakdowns, log."""

    plugin: bool
    reports: dict[int, dict[str, Any]]  # by TP rank
    breakdowns: list[dict[str, Any]]
    breakdown_files: list[str]
    served_tokens: int
    log: str
    startup_s: float
    specinit_dir: Path

    def breakdown(self, tp_rank: int) -> dict[str, Any]:
        (found,) = [b for b in self.breakdowns if b["tp_rank"] == tp_rank]
        return found


def _collect(handle: Any, plugin: bool, specinit_dir: Path, served_tokens: int) -> RankedLaunch:
    ok = [r for r in handle.scheduler_reports() if "error" not in r]
    reports = {r["ranks"]["tp"]: r for r in ok}
    assert sorted(reports) == list(range(TP)), [r["ranks"] for r in ok]
    return RankedLaunch(
        plugin=plugin,
        reports=reports,
        breakdowns=rank_reports.read_rank_breakdowns(specinit_dir),
        breakdown_files=sorted(p.name for p in specinit_dir.glob("memory-rank*.json")),
        served_tokens=served_tokens,
        log=handle.log_path.read_text(errors="replace"),
        startup_s=handle.startup_s,
        specinit_dir=specinit_dir,
    )


def _start(kind: str, plugin: bool, capacities: tuple[int, int], work_dir: Path) -> RankedLaunch:
    specinit_dir = work_dir / "specinit"
    specinit_dir.mkdir()
    launcher = {"server": cpu_server, "engine": cpu_engine}[kind]
    with launcher(
        llama_family.tiny_llama_target(),
        draft_model_path=eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
        algorithm=ALGORITHM,
        plugin=plugin,
        capacity_bytes=capacities[0],
        work_dir=work_dir,
        startup_timeout_s=STARTUP_BOUND_S,
        extra_env={
            REPORT_DIR_ENV: str(specinit_dir),
            PER_DEVICE_CAPACITY_ENV: ",".join(map(str, capacities)),
        },
        tp_size=TP,
        **SPEC_FLAGS,
    ) as handle:
        info = handle.server_info()
        return _collect(handle, plugin, specinit_dir, info["max_total_num_tokens"])


LAUNCHES = {
    "server-on-asymmetric": ("server", True, (CAPACITY, TIGHT_CAPACITY)),
    "engine-on": ("engine", True, (CAPACITY, CAPACITY)),
    "engine-off": ("engine", False, (CAPACITY, CAPACITY)),
}


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], RankedLaunch]:
    return launch_cache(
        tmp_path_factory,
        {name: functools.partial(_start, *spec) for name, spec in LAUNCHES.items()},
    )


def rank_plan(report: dict[str, Any], draft_weight_bytes: int) -> budget.PoolPlan:
    """``budget.plan_pools`` from one rank's OWN meter readings and the per-rank geometry."""
    meter = meter_budget(report)
    inputs = budget.BudgetInputs(
        pre_load_free_bytes=meter.pre_load_free_bytes,
        mem_fraction_static=F,
        target_kv=kv_spec(TARGET_ON_RANK),
        target_weight_bytes=runner(report, "target")["weight_bytes"],
        page_size=1,
        context_len=DEFAULT_TARGET.max_position_embeddings,
        draft=budget.DraftSpec(
            algorithm=ALGORITHM, kv_pools=(kv_spec(DRAFT_ON_RANK),), weight_bytes=draft_weight_bytes
        ),
        max_running_requests=report["server_args"]["max_running_requests"],
        measured_resident_bytes=meter.resident_bytes,
    )
    return budget.plan_pools(inputs)


def pools_and_resident(report: dict[str, Any]) -> int:
    """What this rank's budget covers: resident bytes at sizing (meter) + both KV buffers."""
    return (
        meter_budget(report).resident_bytes
        + kv_buffer_bytes(runner(report, "target")["kv_pool"])
        + kv_buffer_bytes(runner(report, "draft")["kv_pool"])
    )


# --------------------------------------------------------------------------- plugin on


# launch_server with unequal ranks in CI; the same pair through sglang.Engine (equal ranks) is in
# the slow set, with the stock TP 2 contrast that launches it too.
@pytest.mark.parametrize(
    "name", ["server-on-asymmetric", pytest.param("engine-on", marks=pytest.mark.slow)]
)
def test_both_ranks_hold_half_of_every_kv_head_set(
    launch: Callable[[str], RankedLaunch], name: str
) -> None:
    run = launch(name)
    for tp_rank, report in run.reports.items():
        assert report["ranks"]["gpu_id"] == tp_rank
        assert report["specinit_loaded"]
        for role, shape in (("target", TARGET_ON_RANK), ("draft", DRAFT_ON_RANK)):
            pool = runner(report, role)["kv_pool"]
            geometry = (pool["layer_num"], pool["head_num"], pool["head_dim"])
            assert geometry == (shape.layers, shape.kv_heads, shape.head_dim), (tp_rank, role)
    assert "Expected a cuda device" not in run.log
    for rank in range(TP):
        for phase in range(1, 5):
            assert f"TP{rank}] [specinit] phase {phase}/4" in run.log, (rank, phase)


def test_every_rank_sizes_the_token_count_of_the_tightest_rank(
    launch: Callable[[str], RankedLaunch],
) -> None:
    run = launch("server-on-asymmetric")
    roomy, tight = run.reports[0], run.reports[1]
    assert (roomy["meter"]["capacity_bytes"], tight["meter"]["capacity_bytes"]) == (
        CAPACITY,
        TIGHT_CAPACITY,
    )
    counts = {r["scheduler"]["max_total_num_tokens"] for r in run.reports.values()}
    assert counts == {run.served_tokens}, counts
    draft_weights = run.breakdown(1)["draft_weight_bytes"]
    # The tight rank's own readings predict exactly the count every rank sized ...
    assert rank_plan(tight, draft_weights).tokens == run.served_tokens
    # ... while the roomy rank alone would have sized about 24 MiB worth of tokens more.
    extra = rank_plan(roomy, draft_weights).tokens - run.served_tokens
    per_token = TARGET_ON_RANK.kv_bytes_per_token() + DRAFT_ON_RANK.kv_bytes_per_token()
    assert extra == pytest.approx(F * (CAPACITY - TIGHT_CAPACITY) / per_token, rel=0.01)
    for report in run.reports.values():
        for role in ("target", "draft"):
            assert runner(report, role)["kv_pool"]["size"] == run.served_tokens


def test_budget_holds_on_the_tightest_rank(launch: Callable[[str], RankedLaunch]) -> None:
    run = launch("server-on-asymmetric")
    tight, roomy = run.reports[1], run.reports[0]
    per_token = TARGET_ON_RANK.kv_bytes_per_token() + DRAFT_ON_RANK.kv_bytes_per_token()
    # Against the tight rank's own free memory before loading: inside, and full to one token.
    tight_budget = meter_budget(tight).budget_bytes
    used = pools_and_resident(tight)
    assert used <= tight_budget
    assert tight_budget - used < per_token
    # The roomy rank holds the same pools with its extra 24 MiB x f unused.
    roomy_slack = meter_budget(roomy).budget_bytes - pools_and_resident(roomy)
    assert roomy_slack == pytest.approx(F * (CAPACITY - TIGHT_CAPACITY), rel=0.01)
    # Each rank's process really holds what it was given, within its own device.
    for report in (tight, roomy):
        assert report["meter"]["used_bytes"] <= report["meter"]["capacity_bytes"]
    assert pre_load_reading(tight)["free_bytes"] < pre_load_reading(roomy)["free_bytes"]


def test_each_rank_writes_its_own_report_and_says_whether_it_is_the_tightest(
    launch: Callable[[str], RankedLaunch],
) -> None:
    run = launch("server-on-asymmetric")
    assert run.breakdown_files == ["memory-rank0-pp0-tp0-dp0.json", "memory-rank1-pp0-tp1-dp0.json"]
    roomy, tight = run.breakdown(0), run.breakdown(1)
    assert (roomy["rank_index"], tight["rank_index"]) == (0, 1)
    assert {b["tokens"] for b in run.breakdowns} == {run.served_tokens}
    assert tight["tightest_rank"] is True and roomy["tightest_rank"] is False
    assert roomy["free_above_tightest_bytes"] == pytest.approx(CAPACITY - TIGHT_CAPACITY, abs=64)
    assert rank_reports.tightest(run.breakdowns)["tp_rank"] == 1
    # Each rank's summary line, from data that rank already had (no added collective).
    assert "TP1] [specinit] rank 1 (pp0 tp1 dp0) is the tightest rank" in run.log
    assert "TP0] [specinit] rank 0 (pp0 tp0 dp0) is not the tightest rank: 24.00 MiB" in run.log
    # The JSON log lines carry the same dicts as the files.
    lines = [ln for ln in run.log.splitlines() if "SPECINIT_MEMORY " in ln]
    logged = sorted(
        (json.loads(ln.split("SPECINIT_MEMORY ", 1)[1]) for ln in lines),
        key=lambda b: b["rank_index"],
    )
    assert logged == run.breakdowns


def test_plan_tp2_equals_what_both_ranks_allocate(
    launch: Callable[[str], RankedLaunch], tmp_path: Path
) -> None:
    run = launch("server-on-asymmetric")
    tight = run.breakdown(1)
    argv = [
        sys.executable, "-m", "sglang_specinit.planner.cli", "plan", "--json",
        "--model-path", str(llama_family.tiny_llama_target()),
        "--speculative-algorithm", ALGORITHM,
        "--speculative-draft-model-path", str(eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT)),
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4",
        "--mem-fraction-static", str(F), "--tp", str(TP),
        "--device", "cpu", "--device-memory", str(TIGHT_CAPACITY),
        "--pre-load-free-bytes", str(tight["pre_load_free_bytes"]),
        "--resident-bytes", str(tight["resident_bytes"]),
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    planned = json.loads(result.stdout)
    for report in run.reports.values():
        target, draft = runner(report, "target"), runner(report, "draft")
        assert planned["tokens"] == target["kv_pool"]["size"] == draft["kv_pool"]["size"]
        assert planned["target_kv_pool_bytes"] == kv_buffer_bytes(target["kv_pool"])
        assert planned["draft_kv_pool_bytes"] == kv_buffer_bytes(draft["kv_pool"])
        # Weights per rank, from checkpoint headers: every parameter this rank holds, with the
        # norms and the EAGLE3 fc whole (replicated) and the vocabulary tables halved; plus the
        # target's buffers no checkpoint stores (its rotary cos/sin cache, whole on each rank).
        buffers = planned["target_buffers"]["bytes"]
        assert buffers == sum(target["buffer_bytes"].values()) > 0
        assert planned["target_weight_bytes"] == sum(target["parameter_bytes"].values()) + buffers
        own = {k: v for k, v in draft["parameter_bytes"].items() if "embed_tokens" not in k}
        assert planned["draft_weight_bytes"] == sum(own.values())
    for key in ("tokens", "target_kv_bytes_per_token", "draft_kv_bytes_per_token", "budget_bytes"):
        assert {b[key] for b in run.breakdowns} == {planned[key]}, key
    assert planned["tp_size"] == TP


# --------------------------------------------------------------------------- plugin off


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
        assert pools_and_resident(report) <= meter_budget(report).budget_bytes
    assert phased.served_tokens < stock.served_tokens


# --------------------------------------------------------------------------- other layouts


@pytest.mark.slow
def test_dp_attention_dp2_tp2_sizes_full_kv_heads_on_both_ranks(tmp_path: Path) -> None:
    """``--enable-dp-attention --dp 2 --tp 2``: attention-TP size 1, so each rank holds every KV
    head of both models, and an EAGLE3 draft is built whole on the attention-TP group."""
    specinit_dir = tmp_path / "specinit"
    specinit_dir.mkdir()
    with cpu_server(
        llama_family.tiny_llama_target(),
        draft_model_path=eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
        algorithm=ALGORITHM,
        plugin=True,
        work_dir=tmp_path,
        startup_timeout_s=STARTUP_BOUND_S,
        extra_env={REPORT_DIR_ENV: str(specinit_dir)},
        tp_size=TP,
        dp_size=2,
        enable_dp_attention=True,
        **SPEC_FLAGS,
    ) as server:
        run = _collect(server, True, specinit_dir, server.server_info()["max_total_num_tokens"])
    assert run.breakdown_files == ["memory-rank0-pp0-tp0-dp0.json", "memory-rank1-pp0-tp1-dp1.json"]
    for report in run.reports.values():
        for role, shape in (("target", DEFAULT_TARGET), ("draft", TP2_EAGLE3_DRAFT)):
            pool = runner(report, role)["kv_pool"]
            assert (pool["head_num"], pool["head_dim"]) == (shape.kv_heads, shape.head_dim)
            assert pool["size"] == run.served_tokens
    tight = run.breakdown(1)
    argv = [
        sys.executable, "-m", "sglang_specinit.planner.cli", "plan", "--json",
        "--model-path", str(llama_family.tiny_llama_target()),
        "--speculative-algorithm", ALGORITHM,
        "--speculative-draft-model-path", str(eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT)),
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4", "--mem-fraction-static", str(F),
        "--tp", "2", "--dp-size", "2", "--enable-dp-attention",
        "--device", "cpu", "--device-memory", str(CAPACITY),
        "--pre-load-free-bytes", str(tight["pre_load_free_bytes"]),
        "--resident-bytes", str(tight["resident_bytes"]),
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    planned = json.loads(result.stdout)
    assert {b["tokens"] for b in run.breakdowns} == {planned["tokens"], run.served_tokens}
    for report in run.reports.values():
        target, draft = runner(report, "target"), runner(report, "draft")
        assert planned["target_kv_pool_bytes"] == kv_buffer_bytes(target["kv_pool"])
        assert planned["draft_kv_pool_bytes"] == kv_buffer_bytes(draft["kv_pool"])
        # Llama's attention stays on the full TP group; the EAGLE3 draft is whole on each rank;
        # the target's rotary cos/sin cache (no checkpoint stores it) is whole on each rank.
        buffers = planned["target_buffers"]["bytes"]
        assert buffers == sum(target["buffer_bytes"].values()) > 0
        assert planned["target_weight_bytes"] == sum(target["parameter_bytes"].values()) + buffers
        own = {k: v for k, v in draft["parameter_bytes"].items() if "embed_tokens" not in k}
        assert planned["draft_weight_bytes"] == sum(own.values())


PP_REFUSAL = "Pipeline parallelism is not compatible with overlap schedule, speculative decoding"


def _check_server_args(**kwargs: Any) -> tuple[bool, str | None]:
    """0.5.13.post1's ``ServerArgs(**kwargs).check_server_args()`` in this process, as the
    launcher runs it: (the overlap-schedule switch it settled on, the refusal or None).

    ``ServerArgs.__post_init__`` exports a few ``SGLANG_*`` defaults to ``os.environ``; they are
    undone so that later launches from this process inherit the environment they had.
    """
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
    """sglang 0.5.13.post1 refuses ``--pp-size 2`` with a speculative algorithm on any device:
    ``ServerArgs.check_server_args``, which the launcher runs before any rank starts, asserts
    ``PP_REFUSAL``. Asserted on SGLang's own check, without a launch (the plugin hooks neither
    ``ServerArgs`` checks nor PP on 0.5.13.x). The same PP 2 arguments without the draft pass,
    and SGLang has already turned overlap scheduling off for PP, so the refusal is the draft's.
    When a later SGLang accepts PP 2 with a draft this fails: launch it then, and check one
    memory report per pipeline stage."""
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
