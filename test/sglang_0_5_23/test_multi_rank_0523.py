"""Multi-rank launches on the ``sglang_0_5_23`` generation, device cpu, beyond the asymmetric
TP 2 launch every generation runs (``test/shared/test_tp2_ranks.py``): the same tiny pair
(:mod:`harness.launch.tp2_pair`; pynccl off on device cpu: 0.5.23's
``init_model_parallel_group`` still defaults ``use_pynccl`` on and dies building a
``PyNcclCommunicator``, and one simulated device per rank, bound from the device the launcher
publishes in the scheduler's runtime context)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.checkpoints.eagle_drafts import TP2_EAGLE3_DRAFT
from harness.checkpoints.llama_family import DEFAULT_TARGET
from harness.cpu_doubles.faults import FAIL_DRAFT_RANK_ENV, PAUSE_DRAFT_POOL_ENV
from harness.launch.multi_rank import EndedLaunch, run_server_to_end
from harness.launch.processes import rank_log_lines
from harness.launch.tp2_pair import (
    ALGORITHM,
    CAPACITY,
    MULTI_RANK_TIMEOUT_S,
    SPEC_FLAGS,
    STARTUP_BOUND_S,
    TP,
    assert_plan_equals_ranks,
    planner_argv,
    run_planner,
    start_tp2,
)
from harness.reports.report_reading import REPORT_DIR_ENV, runner

pytestmark = [
    pytest.mark.cpu_engine,
    pytest.mark.multi_rank,
    pytest.mark.timeout(MULTI_RANK_TIMEOUT_S),
]


@pytest.mark.slow
def test_dp_attention_dp2_tp2_sizes_full_kv_heads_on_both_ranks(tmp_path: Path) -> None:
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


@pytest.mark.slow
def test_sigterm_while_the_pools_are_allocated_ends_the_launch(tmp_path: Path) -> None:
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
