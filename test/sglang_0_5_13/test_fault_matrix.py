"""A launch stock 0.5.13.post1 starts that the plugin must price, not refuse: an fp8 KV cache
for the target with a bf16 draft, at TP 1 and 2 (refused/interrupted rows: ``test/shared``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.checkpoints.eagle_drafts import TP2_EAGLE3_DRAFT
from harness.launch.engine import cpu_engine
from harness.matrices.plan_verdicts import ALGORITHM, SPEC_FLAGS
from harness.reports.report_reading import REPORT_DIR_ENV, read_rank_breakdowns, runner

pytestmark = [pytest.mark.cpu_engine, pytest.mark.multi_rank, pytest.mark.timeout(900)]

BOUND_S = 600.0


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
    # Each rank holds 1/tp of the KV heads, at one byte per element.
    draft_cell = TP2_EAGLE3_DRAFT.kv_bytes_per_token() // tp // 2
    target_cell = llama_family.DEFAULT_TARGET.kv_bytes_per_token() // tp // 2
    for report, breakdown in zip(
        sorted(reports, key=lambda r: r["ranks"]["tp"]), breakdowns, strict=True
    ):
        # The draft is bf16, its KV pool follows --kv-cache-dtype: one byte per element.
        assert runner(report, "draft")["kv_pool"]["dtype"] == "torch.uint8"
        assert breakdown["draft_kv_bytes_per_token"] == draft_cell
        assert breakdown["target_kv_bytes_per_token"] == target_cell
        assert breakdown["allocated_draft_kv_pool_bytes"] == breakdown["draft_kv_pool_bytes"]
        assert breakdown["allocated_target_kv_pool_bytes"] == breakdown["target_kv_pool_bytes"]
        assert breakdown["headroom_bytes"] >= 0
