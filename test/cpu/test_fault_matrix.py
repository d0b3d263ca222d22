"""Launches that go wrong, at TP 1 and TP 2, with the plugin on: each must end cleanly.

Every row is a live ``launch_server`` on device cpu
(``harness.launch.multi_rank.run_server_to_end``, bounded: a hang fails with each rank's last log
lines). Each must end with a non-zero exit, the one message that names the file or flag to change,
no process of the launch left alive, and nothing half-built: the rows
(``harness.matrices.refused_launches``, shared with the 0.5.23 matrix in
``test/sglang_0_5_23/test_fault_matrix_0523.py``) are refused in the launcher
(``sglang_specinit.launch_checks`` through ``sglang_0_5_13.launch_checks``), so no rank starts and
no pool exists.

Two rows are not refusals and have their own tests: an fp8 KV cache for the target with a bf16
draft is a valid launch (the draft's pool follows ``--kv-cache-dtype``; both are priced at one
byte per element), and SIGTERM while phase 3 allocates, which ends the launch through SGLang's
own signal handling.

Timing (2 cores, lightly loaded): a launcher-side refusal ends in ~22 s (SGLang's imports);
fp8 at TP 1 ~70 s, SIGTERM at TP 1 ~47 s; their TP 2 runs (``slow``) take 1.5-2 min each.
"""

from __future__ import annotations

import json
import signal
from dataclasses import replace
from pathlib import Path

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.checkpoints.eagle_drafts import TP2_EAGLE3_DRAFT
from harness.cpu_doubles.faults import PAUSE_DRAFT_POOL_ENV
from harness.launch.engine import cpu_engine
from harness.launch.multi_rank import EndedLaunch, run_server_to_end
from harness.matrices.refused_launches import (
    ALGORITHM,
    REFUSED,
    SPEC_FLAGS,
    assert_refused_by_the_launcher,
)
from harness.reports.report_reading import REPORT_DIR_ENV, read_rank_breakdowns, runner

pytestmark = [pytest.mark.cpu_engine, pytest.mark.multi_rank, pytest.mark.timeout(900)]

BOUND_S = 600.0


def assert_ended_cleanly(run: EndedLaunch) -> None:
    """Non-zero exit, and no process of the launch's session outlived it."""
    assert run.returncode != 0, run.rank_tails()
    assert run.survivors == [], run.survivors


# Every row's check and message are unit-tested without a launch (test/unit/test_launch_checks.py).
# End to end, one launch costs SGLang's imports (~22 s), so CI runs at TP 1 one file row and the
# two rows stock would otherwise start on a CPU device (fraction 1.5: refused only later, in the
# scheduler; a draft of another width: fails on its first speculative forward), and one flag row
# at TP 2 (a refusal in the launcher happens before any rank exists, so TP only changes the
# flag); the rest of the matrix runs with SPECINIT_TEST_SLOW=1.
IN_CI = {
    ("truncated-draft-shard", 1),
    ("mem-fraction-1.5", 1),
    ("draft-hidden-size", 1),
    ("mem-fraction-0", 2),
}
REFUSED_CASES = [
    pytest.param(
        row,
        tp,
        id=f"{row}-{tp}",
        marks=() if (row, tp) in IN_CI else pytest.mark.slow,
    )
    for row in sorted(REFUSED)
    for tp in (1, 2)
]


@pytest.mark.parametrize(("row", "tp"), REFUSED_CASES)
def test_refused_before_any_rank_starts(row: str, tp: int, tmp_path: Path) -> None:
    spec = REFUSED[row]
    draft = spec.make_draft(tmp_path)
    specinit_dir = tmp_path / "specinit"
    specinit_dir.mkdir()
    run = run_server_to_end(
        llama_family.tiny_llama_target(),
        tmp_path / "run",
        bound_s=BOUND_S,
        draft_model_path=draft,
        algorithm=ALGORITHM,
        tp_size=tp,
        extra_env={REPORT_DIR_ENV: str(specinit_dir)},
        **SPEC_FLAGS,
        **spec.flags,
    )
    assert_ended_cleanly(run)
    # Refused in the launcher: no scheduler rank ever started, so nothing was allocated.
    assert_refused_by_the_launcher(run.log, spec, draft)
    assert run.reports == []
    assert not list(specinit_dir.iterdir())


# The fp8 prices themselves are checked per pool class without an Engine (test_pool_parity).
@pytest.mark.parametrize("tp", [pytest.param(t, marks=pytest.mark.slow) for t in (1, 2)])
def test_fp8_target_kv_with_a_bf16_draft_starts_and_prices_both_pools_at_one_byte(
    tp: int, tmp_path: Path
) -> None:
    specinit_dir = tmp_path / "specinit"
    specinit_dir.mkdir()
    with cpu_engine(
        llama_family.tiny_llama_target(),
        draft_model_path=eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
        algorithm=ALGORITHM,
        plugin=True,
        work_dir=tmp_path,
        startup_timeout_s=BOUND_S,
        extra_env={REPORT_DIR_ENV: str(specinit_dir)},
        kv_cache_dtype="fp8_e4m3",
        tp_size=tp,
        **SPEC_FLAGS,
    ) as engine:
        reports = [r for r in engine.scheduler_reports() if "error" not in r]
    breakdowns = read_rank_breakdowns(specinit_dir)
    assert len(reports) == len(breakdowns) == tp
    draft_shape = replace(TP2_EAGLE3_DRAFT, kv_heads=TP2_EAGLE3_DRAFT.kv_heads // tp)
    target_shape = replace(
        llama_family.DEFAULT_TARGET, kv_heads=llama_family.DEFAULT_TARGET.kv_heads // tp
    )
    for report, breakdown in zip(
        sorted(reports, key=lambda r: r["ranks"]["tp"]), breakdowns, strict=True
    ):
        # The draft is bf16, its KV pool follows --kv-cache-dtype: one byte per element.
        assert runner(report, "draft")["kv_pool"]["dtype"] == "torch.uint8"
        assert breakdown["draft_kv_bytes_per_token"] == draft_shape.kv_bytes_per_token() // 2
        assert breakdown["target_kv_bytes_per_token"] == target_shape.kv_bytes_per_token() // 2
        assert breakdown["allocated_draft_kv_pool_bytes"] == breakdown["draft_kv_pool_bytes"]
        assert breakdown["allocated_target_kv_pool_bytes"] == breakdown["target_kv_pool_bytes"]
        assert breakdown["headroom_bytes"] >= 0


@pytest.mark.parametrize("tp", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_sigterm_while_phase_3_allocates_ends_the_launch(tp: int, tmp_path: Path) -> None:
    specinit_dir = tmp_path / "specinit"
    specinit_dir.mkdir()
    run = run_server_to_end(
        llama_family.tiny_llama_target(),
        tmp_path / "run",
        bound_s=BOUND_S,
        # Sent once a draft runner is held in its pool allocation (the target's pool exists).
        signal_on_marker=("draft-pool-paused-*.json", signal.SIGTERM),
        draft_model_path=eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
        algorithm=ALGORITHM,
        tp_size=tp,
        extra_env={REPORT_DIR_ENV: str(specinit_dir), PAUSE_DRAFT_POOL_ENV: "120"},
        **SPEC_FLAGS,
    )
    assert run.signalled_at_s is not None, run.rank_tails()
    assert_ended_cleanly(run)
    # It ended long before the 120 s pause would have: the signal, not the pause, ended it.
    assert run.elapsed_s - run.signalled_at_s < 60, run.rank_tails()
    # Half-built pools are never reported as a finished init.
    assert not list(specinit_dir.glob("memory-rank*.json"))
    assert "phase 3/4 allocate KV pools done" not in run.log
    markers = [json.loads(p.read_text()) for p in run.work_dir.glob("reports/draft-pool-*.json")]
    assert markers, "the pause double never ran"
