"""The tiny pair interrupted in init (a rank's draft failing, SIGTERM in the draft's pool
allocation) ends on every rank, promptly, with no finished init reported."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.checkpoints.eagle_drafts import TP2_EAGLE3_DRAFT
from harness.cpu_doubles.faults import FAIL_DRAFT_RANK_ENV, PAUSE_DRAFT_POOL_ENV
from harness.launch.engine import EndedLaunch, assert_ended_cleanly, run_server_to_end
from harness.launch.processes import rank_log_lines
from harness.launch.tp2_pair import ALGORITHM, MULTI_RANK_TIMEOUT_S, SPEC_FLAGS, STARTUP_BOUND_S, TP
from harness.matrices.fidelity_probe import PHASES_ITSELF
from harness.releases import installed_row
from harness.reports.report_reading import REPORT_DIR_ENV

pytestmark = [
    pytest.mark.cpu_engine,
    pytest.mark.multi_rank,
    pytest.mark.timeout(MULTI_RANK_TIMEOUT_S),
]

FAILING_RANK = 1
RELEASE = getattr(installed_row(), "name", "?")
# SIGTERM in the pool phase: 0.5.13.x at TP 1 in CI; TP 2 slow.
SIGTERM_TP = [*([1] if PHASES_ITSELF else []), pytest.param(TP, marks=pytest.mark.slow)]


def _ended(work_dir: Path, extra_env: dict[str, str], **kwargs: Any) -> tuple[EndedLaunch, Path]:
    """The tiny pair (plugin on, TP 2 by default) run to its end; the plugin's report dir."""
    specinit_dir = work_dir / "specinit"
    specinit_dir.mkdir(parents=True)
    run = run_server_to_end(
        llama_family.tiny_llama_target(),
        work_dir / "run",
        bound_s=STARTUP_BOUND_S,
        draft_model_path=eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
        algorithm=ALGORITHM,
        extra_env={REPORT_DIR_ENV: str(specinit_dir), **extra_env},
        **{"plugin": True, "tp_size": TP, **SPEC_FLAGS, **kwargs},
    )
    return run, specinit_dir


@pytest.mark.parametrize("plugin", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_draft_failure_on_one_rank_ends_the_launch_on_every_rank(
    plugin: bool, tmp_path: Path
) -> None:
    run, specinit_dir = _ended(
        tmp_path, plugin=plugin, extra_env={FAIL_DRAFT_RANK_ENV: str(FAILING_RANK)}
    )
    assert_ended_cleanly(run)
    (marker,) = run.work_dir.glob(f"reports/draft-failure-rank{FAILING_RANK}.json")
    down_s = run.ended_wall_time - json.loads(marker.read_text())["wall_time"]
    print(f"\n[{RELEASE} rank failure, plugin {'on' if plugin else 'off'}] launch down "
          f"{down_s:.1f} s after rank {FAILING_RANK}'s draft failed; "
          f"{run.elapsed_s:.1f} s in all")  # fmt: skip

    # The cause, on the failing rank: its log and its scheduler's error report.
    ranks = rank_log_lines(run.log)
    failing, healthy = "\n".join(ranks["TP1"]), "\n".join(ranks["TP0"])
    assert "InjectedDraftLoadError" in failing and "unreadable on tp rank 1" in failing
    (error,) = [r for r in run.reports if "error" in r]
    assert error["ranks"]["tp"] == FAILING_RANK and "InjectedDraftLoadError" in error["error"]
    assert "InjectedDraftLoadError" not in healthy

    allocated_on_healthy = "KV Cache is allocated" in healthy
    if PHASES_ITSELF and not plugin:
        # Stock 0.5.13.x builds the target's pool before the draft exists.
        assert allocated_on_healthy
        return
    # Rank 0 had its target loaded (both ranks passed the draft's first collective before rank
    # 1 failed) and allocated no pool: 0.5.13.x's phases, or 0.5.23's own init, which builds
    # the draft before any pool.
    assert ("phase 1/4 load target weights done" if PHASES_ITSELF else "Load weight end") in healthy
    assert not allocated_on_healthy, ranks["TP0"][-20:]
    pools_done = "phase 3/4 allocate KV pools done" if PHASES_ITSELF else "KV Cache is allocated"
    assert pools_done not in run.log
    assert not list(specinit_dir.glob("memory-rank*.json"))


@pytest.mark.parametrize("tp", SIGTERM_TP)
def test_sigterm_while_the_draft_pool_is_allocated_ends_the_launch(tp: int, tmp_path: Path) -> None:
    run, specinit_dir = _ended(
        tmp_path,
        # Sent once a draft runner is held in its pool allocation (the target's pool exists).
        signal_on_marker=("draft-pool-paused-*.json", signal.SIGTERM),
        extra_env={PAUSE_DRAFT_POOL_ENV: "120"},
        tp_size=tp,
    )
    assert run.signalled_at_s is not None, run.rank_tails()
    assert_ended_cleanly(run)
    down_s = run.elapsed_s - run.signalled_at_s
    print(f"\n[{RELEASE} SIGTERM in the pool phase, TP {tp}] launch down {down_s:.1f} s after "
          f"the signal; {run.elapsed_s:.1f} s in all")  # fmt: skip
    # It ended long before the 120 s pause would have: the signal, not the pause, ended it.
    assert down_s < 60, run.rank_tails()
    assert list(run.work_dir.glob("reports/draft-pool-paused-*.json")), "the pause double never ran"
    # Half-built pools are never reported as a finished init.
    assert not list(specinit_dir.glob("memory-rank*.json"))
    if PHASES_ITSELF:
        assert "phase 3/4 allocate KV pools done" not in run.log
    else:
        # The target's pool existed when the signal came.
        assert "KV Cache is allocated" in run.log
        assert "SPECINIT_MEMORY " not in run.log
