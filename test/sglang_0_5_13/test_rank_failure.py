"""One rank's draft fails to load at TP 2: the launch must end on every rank, promptly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.checkpoints.eagle_drafts import TP2_EAGLE3_DRAFT
from harness.cpu_doubles.faults import FAIL_DRAFT_RANK_ENV
from harness.launch.multi_rank import run_server_to_end
from harness.launch.processes import rank_log_lines
from harness.reports.report_reading import REPORT_DIR_ENV

pytestmark = [pytest.mark.cpu_engine, pytest.mark.multi_rank, pytest.mark.timeout(900)]

BOUND_S = 600.0
FAILING_RANK = 1


@pytest.mark.parametrize("plugin", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_draft_failure_on_one_rank_ends_the_launch_on_every_rank(
    plugin: bool, tmp_path: Path
) -> None:
    specinit_dir = tmp_path / "specinit"
    specinit_dir.mkdir()
    run = run_server_to_end(
        llama_family.tiny_llama_target(),
        tmp_path / "run",
        plugin=plugin,
        bound_s=BOUND_S,
        draft_model_path=eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
        algorithm="EAGLE3",
        tp_size=2,
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        extra_env={REPORT_DIR_ENV: str(specinit_dir), FAIL_DRAFT_RANK_ENV: str(FAILING_RANK)},
    )
    assert run.returncode != 0, run.rank_tails()
    assert run.survivors == [], run.survivors
    (marker,) = run.work_dir.glob(f"reports/draft-failure-rank{FAILING_RANK}.json")
    down_s = run.ended_wall_time - json.loads(marker.read_text())["wall_time"]
    print(f"\n[rank failure, plugin {'on' if plugin else 'off'}] launch down {down_s:.1f} s "
          f"after rank {FAILING_RANK}'s draft failed; {run.elapsed_s:.1f} s in all")  # fmt: skip

    # The cause, on the failing rank: its log and its scheduler's error report.
    ranks = rank_log_lines(run.log)
    failing, healthy = "\n".join(ranks["TP1"]), "\n".join(ranks["TP0"])
    assert "InjectedDraftLoadError" in failing and "unreadable on tp rank 1" in failing
    (error,) = [r for r in run.reports if "error" in r]
    assert error["ranks"]["tp"] == FAILING_RANK and "InjectedDraftLoadError" in error["error"]
    assert "InjectedDraftLoadError" not in healthy

    allocated_on_healthy = "KV Cache is allocated" in healthy
    if plugin:
        # Phased: rank 0 had its target loaded (both ranks passed the draft's first collective
        # before rank 1 failed) and, wherever phase 2 or 3's first collective found it, no pool.
        assert "[specinit] phase 1/4 load target weights done" in healthy
        assert not allocated_on_healthy, ranks["TP0"][-20:]
        assert "phase 3/4 allocate KV pools done" not in run.log
        assert not list(specinit_dir.glob("memory-rank*.json"))
    else:
        # Stock builds the target's pool before the draft exists.
        assert allocated_on_healthy


def test_a_launch_that_outlives_its_bound_fails_with_every_ranks_tail_and_is_killed(
    tmp_path: Path,
) -> None:
    from harness.launch.multi_rank import LaunchDidNotEnd, running_members

    seen: list[int] = []

    def remember_session(launch_pid: int) -> None:
        seen.append(launch_pid)

    with pytest.raises(LaunchDidNotEnd) as hang:
        run_server_to_end(
            llama_family.tiny_llama_target(),
            tmp_path / "run",
            bound_s=3.0,
            on_start=remember_session,
            draft_model_path=eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
            algorithm="EAGLE3",
            tp_size=2,
        )
    assert "launch still running after 3 s" in str(hang.value)
    assert "--- last 12 lines of " in str(hang.value) or "<empty log>" in str(hang.value)
    (session,) = seen
    assert running_members(session) == []
