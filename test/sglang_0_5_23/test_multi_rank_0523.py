"""Multi-rank launches on the real sglang 0.5.23, device cpu: TP 2 on SGLang's own gloo groups.

The same tiny pair as ``test/sglang_0_5_13/test_multi_rank.py`` (0.5.13.post1): a Llama target
with 2 KV heads of dim 16 and an EAGLE3 draft with 2 KV heads of dim 48, so both models' KV
heads split across the two ranks. TP 2 on device cpu takes, as on 0.5.13.post1, SGLang's own
``SGLANG_CPU_OMP_THREADS_BIND=0|1`` (:func:`harness.launch.engine.omp_threads_bind`) and two CPU
test doubles (:mod:`harness.cpu_doubles.shims`): pynccl off on device cpu (0.5.23's
``init_model_parallel_group`` still defaults ``use_pynccl`` on and dies building a
``PyNcclCommunicator``; the same switch works), and one simulated device per rank, bound from
the device 0.5.23's launcher publishes in the scheduler's runtime context.

What is checked, from each rank's own meter readings and pools (never the plugin's numbers
read back as expectations):

- (a, CI) TP 2 with rank 1's device 24 MiB smaller: both ranks size the same token count, the
  one rank 1's own readings give; the budget holds on rank 1, full to one token; each rank
  writes ``memory-rank<i>-pp<p>-tp<t>-dp<d>.json`` with its own free memory at sizing next to
  SGLang's all-rank minimum and says whether it is the tightest; ``plan --tp 2`` of this
  environment's planner with the server's measured numbers equals both ranks.
- (b, slow) dp-attention dp 2 x tp 2 (``--attn-dp-size 2``): every KV head on both ranks,
  one file per rank.
- (c, CI) rank 1's draft failing to load (the fault double of :mod:`harness.cpu_doubles.faults`)
  ends the launch on every rank: cause in the log, no process left, no pool on the healthy rank.
- (d, slow) SIGTERM while the pools are allocated ends the launch, no report, nothing left.

Every launch is bounded in time; a hang fails with each rank's last log lines and is killed.
The asymmetric launch is started once (module fixture) and read by every (a) test.

Timing (2 shared cores): a TP 2 launch of 0.5.23 is up in 72 s lightly loaded, 167-194 s with
other launches beside it; the rank-failure launch ends ~1 s after the draft fails (117 s in
all), SIGTERM ends it ~1 s after the signal. CI runs two multi-rank launches here, (a) and (c):
~5.5 min on a loaded machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.checkpoints.eagle_drafts import TP2_EAGLE3_DRAFT
from harness.checkpoints.llama_family import DEFAULT_TARGET
from harness.cpu_doubles.faults import FAIL_DRAFT_RANK_ENV, PAUSE_DRAFT_POOL_ENV
from harness.cpu_doubles.shims import PER_DEVICE_CAPACITY_ENV
from harness.launch.engine import cpu_server
from harness.launch.multi_rank import EndedLaunch, run_server_to_end
from harness.launch.processes import rank_log_lines
from harness.launch.sglang_release import extra_python_path
from harness.reports.report_reading import REPORT_DIR_ENV, F, kv_buffer_bytes, kv_spec, runner
from sglang_specinit import budget, rank_reports

MULTI_RANK_TIMEOUT_S = 900
STARTUP_BOUND_S = 600.0
pytestmark = [
    pytest.mark.cpu_engine,
    pytest.mark.multi_rank,
    pytest.mark.timeout(MULTI_RANK_TIMEOUT_S),
]

TP = 2
CAPACITY = 256 << 20
# 24 MiB less on rank 1: 232 / 256 = 0.906, inside SGLang's 10 % TP imbalance check.
TIGHT_CAPACITY = CAPACITY - (24 << 20)
ALGORITHM = "EAGLE3"
SPEC_FLAGS = {"speculative_num_steps": 3, "speculative_eagle_topk": 1}
# What one rank holds of each model's KV: half the KV heads.
TARGET_ON_RANK = replace(DEFAULT_TARGET, kv_heads=DEFAULT_TARGET.kv_heads // TP)
DRAFT_ON_RANK = replace(TP2_EAGLE3_DRAFT, kv_heads=TP2_EAGLE3_DRAFT.kv_heads // TP)
PER_TOKEN_ON_RANK = TARGET_ON_RANK.kv_bytes_per_token() + DRAFT_ON_RANK.kv_bytes_per_token()
GIB = 1 << 30

# 0.5.23's meter callers (harness.cpu_doubles.shims records who asked).
PRE_LOAD = "bootstrap.measure_pre_model_load_memory"
PROFILE = "KVCacheConfigurator._profile_available_bytes"


# --------------------------------------------------------------------------- one launch


@dataclass
class RankedLaunch:
    """What one multi-rank launch left behind: per-rank scheduler reports, breakdowns, log."""

    reports: dict[int, dict[str, Any]]  # by TP rank
    breakdowns: list[dict[str, Any]]
    breakdown_files: list[str]
    served_tokens: int
    log: str
    startup_s: float

    def breakdown(self, tp_rank: int) -> dict[str, Any]:
        (found,) = [b for b in self.breakdowns if b["tp_rank"] == tp_rank]
        return found


def start_tp2(work_dir: Path, capacities: tuple[int, int], **server_args: Any) -> RankedLaunch:
    """A plugin-on TP 2 ``launch_server`` of the tiny pair, read whole and torn down."""
    specinit_dir = work_dir / "specinit"
    specinit_dir.mkdir(parents=True)
    with cpu_server(
        llama_family.tiny_llama_target(),
        draft_model_path=eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
        algorithm=ALGORITHM,
        plugin=True,
        capacity_bytes=capacities[0],
        work_dir=work_dir,
        startup_timeout_s=STARTUP_BOUND_S,
        extra_env={
            REPORT_DIR_ENV: str(specinit_dir),
            PER_DEVICE_CAPACITY_ENV: ",".join(map(str, capacities)),
        },
        tp_size=TP,
        **SPEC_FLAGS,
        **server_args,
    ) as server:
        served = server.server_info()["max_total_num_tokens"]
        ok = [r for r in server.scheduler_reports() if "error" not in r]
        log = server.log_path.read_text(errors="replace")
        startup_s = server.startup_s
    reports = {r["ranks"]["tp"]: r for r in ok}
    assert sorted(reports) == list(range(TP)), [r["ranks"] for r in ok]
    print(f"\n[0.5.23 TP 2] up in {startup_s:.1f} s")
    return RankedLaunch(
        reports=reports,
        breakdowns=rank_reports.read_rank_breakdowns(specinit_dir),
        breakdown_files=sorted(p.name for p in specinit_dir.glob("memory-rank*.json")),
        served_tokens=served,
        log=log,
        startup_s=startup_s,
    )


@pytest.fixture(scope="module")
def asymmetric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RankedLaunch]:
    """The (a) launch, started once for every test of this module that reads it."""
    yield start_tp2(tmp_path_factory.mktemp("tp2-asymmetric"), (CAPACITY, TIGHT_CAPACITY))


# --------------------------------------------------------------------------- meter arithmetic


def _reading(report: dict[str, Any], caller: str, index: int = 0) -> dict[str, Any]:
    found = [r for r in report["meter"]["readings"] if r["caller"].endswith(caller)]
    return found[index]


def own_pre_load_free(report: dict[str, Any]) -> int:
    """This rank's own free memory at ``pre_model_load_memory`` (the 2nd of the target's
    three readings in ``measure_pre_model_load_memory``), before SGLang's MIN all-reduce."""
    return _reading(report, PRE_LOAD, 1)["free_bytes"]


def own_free_at_profile(report: dict[str, Any]) -> int:
    """This rank's own free memory where SGLang profiles the target pool."""
    return _reading(report, PROFILE)["free_bytes"]


@dataclass(frozen=True)
class OwnBudget:
    """The budget one rank alone would have: SGLang's float arithmetic on its own readings."""

    pre_load_free_bytes: int
    budget_bytes: int
    available_bytes: int

    @property
    def resident_bytes(self) -> int:
        return self.budget_bytes - self.available_bytes


def own_budget(report: dict[str, Any]) -> OwnBudget:
    pre_gib = own_pre_load_free(report) / GIB
    post_gib = own_free_at_profile(report) / GIB
    pre = int(pre_gib * GIB)
    # KVCacheConfigurator._profile_available_bytes for a text model (no multimodal reserve).
    available = int((post_gib - pre_gib * (1 - F)) * GIB)
    return OwnBudget(pre, int(F * pre), available)


def rank_plan(report: dict[str, Any]) -> budget.PoolPlan:
    """``budget.plan_pools`` from one rank's OWN readings and the per-rank geometry."""
    own = own_budget(report)
    inputs = budget.BudgetInputs(
        pre_load_free_bytes=own.pre_load_free_bytes,
        mem_fraction_static=F,
        target_kv=kv_spec(TARGET_ON_RANK),
        target_weight_bytes=runner(report, "target")["weight_bytes"],
        page_size=1,
        context_len=DEFAULT_TARGET.max_position_embeddings,
        draft=budget.DraftSpec(algorithm=ALGORITHM, kv_pools=(kv_spec(DRAFT_ON_RANK),)),
        measured_resident_bytes=own.resident_bytes,
    )
    return budget.plan_pools(inputs)


def pools_and_resident(report: dict[str, Any]) -> int:
    """What one rank's budget covers: resident bytes at profiling + both KV buffers."""
    return (
        own_budget(report).resident_bytes
        + kv_buffer_bytes(runner(report, "target")["kv_pool"])
        + kv_buffer_bytes(runner(report, "draft")["kv_pool"])
    )


# --------------------------------------------------------------------------- (a) TP 2, CI


def test_each_rank_simulates_its_own_device_and_holds_half_of_every_kv_head_set(
    asymmetric: RankedLaunch,
) -> None:
    run = asymmetric
    for tp_rank, report in run.reports.items():
        # The shim bound each scheduler's meter to the device 0.5.23 published for it.
        assert report["ranks"]["gpu_id"] == tp_rank
        assert report["meter"]["gpu_id"] == tp_rank
        assert report["meter"]["capacity_bytes"] == (CAPACITY, TIGHT_CAPACITY)[tp_rank]
        assert report["specinit_loaded"]
        for role, shape in (("target", TARGET_ON_RANK), ("draft", DRAFT_ON_RANK)):
            pool = runner(report, role)["kv_pool"]
            geometry = (pool["layer_num"], pool["head_num"], pool["head_dim"])
            assert geometry == (shape.layers, shape.kv_heads, shape.head_dim), (tp_rank, role)
        assert f"TP{tp_rank}] [specinit] KV pools on sglang 0.5.23 (rank {tp_rank} " in run.log
    assert "Expected a cuda device" not in run.log


def test_every_rank_sizes_the_token_count_of_the_tightest_rank(asymmetric: RankedLaunch) -> None:
    run = asymmetric
    roomy, tight = run.reports[0], run.reports[1]
    counts = {r["scheduler"]["max_total_num_tokens"] for r in run.reports.values()}
    assert counts == {run.served_tokens}, counts
    # The tight rank's own readings predict exactly the count every rank sized ...
    assert rank_plan(tight).tokens == run.served_tokens
    # ... while the roomy rank alone would have sized about 24 MiB x f worth of tokens more.
    extra = rank_plan(roomy).tokens - run.served_tokens
    assert extra == pytest.approx(F * (CAPACITY - TIGHT_CAPACITY) / PER_TOKEN_ON_RANK, rel=0.01)
    for report in run.reports.values():
        for role in ("target", "draft"):
            assert runner(report, role)["kv_pool"]["size"] == run.served_tokens


def test_budget_holds_on_the_tightest_rank(asymmetric: RankedLaunch) -> None:
    run = asymmetric
    tight, roomy = run.reports[1], run.reports[0]
    # Against the tight rank's own free memory before loading: inside, and full to one token.
    tight_budget = own_budget(tight).budget_bytes
    used = pools_and_resident(tight)
    assert used <= tight_budget
    assert tight_budget - used < PER_TOKEN_ON_RANK, (tight_budget, used)
    # The roomy rank holds the same pools with its extra 24 MiB x f unused.
    roomy_slack = own_budget(roomy).budget_bytes - pools_and_resident(roomy)
    assert roomy_slack == pytest.approx(F * (CAPACITY - TIGHT_CAPACITY), rel=0.01)
    for report in (tight, roomy):
        assert report["meter"]["used_bytes"] <= report["meter"]["capacity_bytes"]
    assert own_pre_load_free(tight) < own_pre_load_free(roomy)


def test_each_rank_writes_its_own_report_and_says_whether_it_is_the_tightest(
    asymmetric: RankedLaunch,
) -> None:
    run = asymmetric
    assert run.breakdown_files == ["memory-rank0-pp0-tp0-dp0.json", "memory-rank1-pp0-tp1-dp0.json"]
    roomy, tight = run.breakdown(0), run.breakdown(1)
    assert (roomy["rank_index"], tight["rank_index"]) == (0, 1)
    assert {b["tokens"] for b in run.breakdowns} == {run.served_tokens}
    # Each rank's free memory at sizing is its own reading where SGLang profiled; the minimum
    # is the tight rank's (SGLang's MIN all-reduce, recovered without another collective).
    for tp_rank, b in enumerate((roomy, tight)):
        assert b["rank_free_at_sizing_bytes"] == own_free_at_profile(run.reports[tp_rank])
        assert b["min_free_at_sizing_bytes"] == pytest.approx(
            own_free_at_profile(run.reports[1]), abs=2
        )
    assert tight["tightest_rank"] is True and roomy["tightest_rank"] is False
    assert roomy["free_above_tightest_bytes"] == pytest.approx(CAPACITY - TIGHT_CAPACITY, abs=64)
    assert rank_reports.tightest(run.breakdowns)["tp_rank"] == 1
    assert "TP1] [specinit] rank 1 (pp0 tp1 dp0) is the tightest rank" in run.log
    assert "TP0] [specinit] rank 0 (pp0 tp0 dp0) is not the tightest rank: 24.00 MiB" in run.log
    # The JSON log lines carry the same dicts as the files.
    lines = [ln for ln in run.log.splitlines() if "SPECINIT_MEMORY " in ln]
    logged = sorted(
        (json.loads(ln.split("SPECINIT_MEMORY ", 1)[1]) for ln in lines),
        key=lambda b: b["rank_index"],
    )
    assert logged == run.breakdowns


def planner_argv(tight: dict[str, Any], *layout: str, device_memory: int) -> list[str]:
    """This environment's ``sglang-specinit plan --json`` with the server's measured numbers."""
    return [
        sys.executable, "-m", "sglang_specinit.planner.cli", "plan", "--json",
        "--model-path", str(llama_family.tiny_llama_target()),
        "--speculative-algorithm", ALGORITHM,
        "--speculative-draft-model-path", str(eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT)),
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4",
        "--mem-fraction-static", str(F), *layout,
        "--device", "cpu", "--device-memory", str(device_memory),
        "--pre-load-free-bytes", str(tight["pre_load_free_bytes"]),
        "--resident-bytes", str(tight["resident_bytes"]),
    ]  # fmt: skip


def run_planner(argv: list[str]) -> dict[str, Any]:
    """Run this environment's planner as an operator would: without the CPU engine switch,
    with the sgl_kernel test double on ``PYTHONPATH`` (0.5.23 imports CPU ops from sgl_kernel
    at module import and sglang-kernel has no CPU build; :mod:`harness.launch.sglang_release`)."""
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
    env["PYTHONPATH"] = os.pathsep.join([*extra_python_path(), env.get("PYTHONPATH", "")])
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def assert_plan_equals_ranks(planned: dict[str, Any], run: RankedLaunch) -> None:
    for report in run.reports.values():
        target, draft = runner(report, "target"), runner(report, "draft")
        assert planned["tokens"] == target["kv_pool"]["size"] == draft["kv_pool"]["size"]
        assert planned["target_kv_pool_bytes"] == kv_buffer_bytes(target["kv_pool"])
        assert planned["draft_kv_pool_bytes"] == kv_buffer_bytes(draft["kv_pool"])
        # Weights per rank, from checkpoint headers: every parameter this rank holds, the
        # draft's embedding (the target's, shared) excepted; plus the target's buffers no
        # checkpoint stores (its rotary cos/sin cache, whole on each rank).
        buffers = planned["target_buffers"]["bytes"]
        assert buffers == sum(target["buffer_bytes"].values()) > 0
        assert planned["target_weight_bytes"] == sum(target["parameter_bytes"].values()) + buffers
        own = {k: v for k, v in draft["parameter_bytes"].items() if "embed_tokens" not in k}
        assert planned["draft_weight_bytes"] == sum(own.values())
    for key in ("tokens", "target_kv_bytes_per_token", "draft_kv_bytes_per_token", "budget_bytes"):
        assert {b[key] for b in run.breakdowns} == {planned[key]}, key


def test_plan_tp2_equals_what_both_ranks_allocate(asymmetric: RankedLaunch) -> None:
    run = asymmetric
    planned = run_planner(
        planner_argv(run.breakdown(1), "--tp", str(TP), device_memory=TIGHT_CAPACITY)
    )
    assert_plan_equals_ranks(planned, run)
    assert planned["tp_size"] == TP


# --------------------------------------------------------------------------- (b) dp-attention


@pytest.mark.slow
def test_dp_attention_dp2_tp2_sizes_full_kv_heads_on_both_ranks(tmp_path: Path) -> None:
    """dp-attention, dp 2 x tp 2 (0.5.23 spells it ``--attn-dp-size 2``; its deprecated
    ``--dp-size 2 --enable-dp-attention`` resolves to the same): attention-TP size 1, so each
    rank holds every KV head of both models, each rank writes its own file (``dp`` = its
    attention-DP rank), and the planner agrees.

    Slow (one more TP 2 launch, ~2 min). In CI, the TP 2 launch (a) covers per-rank sizing,
    files and tightness on 0.5.23; the rank fields of an attention-DP scheduler are unit-tested
    in ``test/unit/test_rank_reports.py``.
    """
    run = start_tp2(tmp_path, (CAPACITY, CAPACITY), attn_dp_size=2)
    assert run.breakdown_files == ["memory-rank0-pp0-tp0-dp0.json", "memory-rank1-pp0-tp1-dp1.json"]
    for report in run.reports.values():
        for role, shape in (("target", DEFAULT_TARGET), ("draft", TP2_EAGLE3_DRAFT)):
            pool = runner(report, role)["kv_pool"]
            assert (pool["head_num"], pool["head_dim"]) == (shape.kv_heads, shape.head_dim)
            assert pool["size"] == run.served_tokens
    assert {b["tokens"] for b in run.breakdowns} == {run.served_tokens}
    assert sum(b["tightest_rank"] for b in run.breakdowns) >= 1
    argv = planner_argv(
        run.breakdown(1), *("--tp", "2", "--attn-dp-size", "2"), device_memory=CAPACITY
    )
    assert_plan_equals_ranks(run_planner(argv), run)


# --------------------------------------------------------------------------- (c) rank failure

FAILING_RANK = 1


def _ended_tp2(work_dir: Path, *, plugin: bool = True, **kwargs: Any) -> tuple[EndedLaunch, Path]:
    specinit_dir = work_dir / "specinit"
    specinit_dir.mkdir(parents=True)
    extra_env = {REPORT_DIR_ENV: str(specinit_dir), **kwargs.pop("extra_env", {})}
    run = run_server_to_end(
        llama_family.tiny_llama_target(),
        work_dir / "run",
        plugin=plugin,
        bound_s=STARTUP_BOUND_S,
        draft_model_path=eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
        algorithm=ALGORITHM,
        tp_size=TP,
        extra_env=extra_env,
        **SPEC_FLAGS,
        **kwargs,
    )
    return run, specinit_dir


@pytest.mark.parametrize("plugin", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_draft_failure_on_one_rank_ends_the_launch_on_every_rank(
    plugin: bool, tmp_path: Path
) -> None:
    """Rank 1's draft fails to load (an ``OSError``, as an unreadable shard gives): the launch
    ends on every rank through SGLang's own error path, with no pool on rank 0.

    0.5.23 loads both models before any pool exists (upstream's own phased init), and the
    target's profiling starts with a MIN all-reduce no rank passes alone, so rank 0 stops
    before allocating, plugin on or off (the stock run is the ``slow`` contrast).
    """
    run, specinit_dir = _ended_tp2(
        tmp_path, plugin=plugin, extra_env={FAIL_DRAFT_RANK_ENV: str(FAILING_RANK)}
    )
    assert run.returncode != 0, run.rank_tails()
    assert run.survivors == [], run.survivors
    (marker,) = run.work_dir.glob(f"reports/draft-failure-rank{FAILING_RANK}.json")
    down_s = run.ended_wall_time - json.loads(marker.read_text())["wall_time"]
    print(f"\n[0.5.23 rank failure, plugin {'on' if plugin else 'off'}] launch down {down_s:.1f} s "
          f"after rank {FAILING_RANK}'s draft failed; {run.elapsed_s:.1f} s in all")  # fmt: skip

    ranks = rank_log_lines(run.log)
    failing, healthy = "\n".join(ranks["TP1"]), "\n".join(ranks["TP0"])
    assert "InjectedDraftLoadError" in failing and "unreadable on tp rank 1" in failing
    (error,) = [r for r in run.reports if "error" in r]
    assert error["ranks"]["tp"] == FAILING_RANK and "InjectedDraftLoadError" in error["error"]
    assert "InjectedDraftLoadError" not in healthy
    # Rank 0 had loaded its target (and reached its draft) and allocated no pool.
    assert "Load weight end" in healthy
    assert "KV Cache is allocated" not in healthy, ranks["TP0"][-20:]
    assert "KV Cache is allocated" not in run.log
    assert not list(specinit_dir.glob("memory-rank*.json"))


# --------------------------------------------------------------------------- (d) SIGTERM


@pytest.mark.slow
def test_sigterm_while_the_pools_are_allocated_ends_the_launch(tmp_path: Path) -> None:
    """SIGTERM to the launcher while a draft runner is held in its pool allocation (the
    target's pool exists, the draft's does not yet): every rank ends, no report, nothing left.

    Slow (one more TP 2 launch). In CI, the rank-failure test (c) checks on 0.5.23 that a TP 2
    launch ending mid-init leaves no process and no report; SIGTERM in the pool phase at TP 1
    runs in CI on 0.5.13.post1 (``test/sglang_0_5_13/test_fault_matrix.py``).
    """
    started = time.monotonic()
    run, specinit_dir = _ended_tp2(
        tmp_path,
        signal_on_marker=("draft-pool-paused-*.json", signal.SIGTERM),
        extra_env={PAUSE_DRAFT_POOL_ENV: "120"},
    )
    assert run.signalled_at_s is not None, run.rank_tails()
    assert run.returncode != 0, run.rank_tails()
    assert run.survivors == [], run.survivors
    down_s = run.elapsed_s - run.signalled_at_s
    print(f"\n[0.5.23 SIGTERM in the pool phase] launch down {down_s:.1f} s after the signal; "
          f"{time.monotonic() - started:.1f} s in all")  # fmt: skip
    # It ended long before the 120 s pause would have: the signal, not the pause, ended it.
    assert down_s < 60, run.rank_tails()
    markers = list(run.work_dir.glob("reports/draft-pool-paused-*.json"))
    assert markers, "the pause double never ran"
    # The target's pool existed when the signal came; the half-built pools were never reported.
    assert "KV Cache is allocated" in run.log
    assert not list(specinit_dir.glob("memory-rank*.json"))
    assert "SPECINIT_MEMORY " not in run.log
