"""TP 2 on two real GPUs: every rank's breakdown against what CUDA holds on that rank."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from gpu_server import breakdowns, gpu_server, probe_records, require
from harness.gpu import gpu_cases, gpu_verdict, storage_identity
from harness.reports import device_probe

pytestmark = pytest.mark.gpu

TP = 2
# The tightest rank's own reading and SGLang's float32 all-reduced minimum agree to this
# (sglang_specinit.rank_reports.TIGHTEST_TOLERANCE_BYTES).
TIGHTEST_TOLERANCE_BYTES = 1 << 20
TOLERANCE = device_probe.BOOKKEEPING_TOLERANCE_BYTES


def test_tp2_every_rank_within_its_budget_against_its_own_cuda_memory(
    tmp_path: Path, wait_for_released_devices: Any, record_property: Any
) -> None:
    case = dataclasses.replace(gpu_cases.case("eagle3"), name="eagle3_tp2", tp=TP)
    require(case)
    wait_for_released_devices(TP)
    with gpu_server(case, tmp_path, plugin=True, mem_fraction=gpu_cases.mem_fraction()) as server:
        info = server.server_info()
        ranks = breakdowns(server)
        names = sorted(p.name for p in server.report_dir.glob("memory-rank*.json"))
        out = server.post(
            "/generate",
            {"text": gpu_cases.PRIME_PROMPT, "sampling_params": {"max_new_tokens": 32}},
            timeout_s=600,
        )
    usages = [device_probe.usage_after_pools(records) for records in probe_records(tmp_path)]

    # One file per rank, none overwritten; one probed scheduler per rank.
    assert names == ["memory-rank0-pp0-tp0-dp0.json", "memory-rank1-pp0-tp1-dp0.json"], names
    assert [b["tp_rank"] for b in ranks] == [0, 1]
    assert len(usages) == TP
    # Every rank sized the same pools from the same all-rank minimum.
    assert {b["tokens"] for b in ranks} == {info["max_total_num_tokens"]}
    assert len({b["pre_load_free_bytes"] for b in ranks}) == 1
    assert len({b["min_free_at_sizing_bytes"] for b in ranks}) == 1
    # The rank whose own reading is the minimum says so; no rank is below it.
    tight = min(ranks, key=lambda b: b["rank_free_at_sizing_bytes"])
    assert tight["tightest_rank"], tight
    for b in ranks:
        assert b["free_above_tightest_bytes"] >= -TIGHTEST_TOLERANCE_BYTES, b
    for rank, (b, usage) in enumerate(zip(ranks, usages, strict=True)):
        record_property(f"memory_rank{rank}", usage.describe())
        assert b["allocated_target_kv_pool_bytes"] == b["target_kv_pool_bytes"], b
        assert b["allocated_draft_kv_pool_bytes"] == b["draft_kv_pool_bytes"], b
        # This rank's CUDA memory once its pools exist (probe) stays inside f x (all-rank
        # minimum free before loading): it holds the same pools as the tightest rank.
        assert usage.pre_load_free_bytes == b["pre_load_free_bytes"]
        assert usage.over_budget_bytes <= TOLERANCE, usage.describe()
        # What torch holds on this GPU covers both pools, and the GPU lost them since this
        # rank's own reading at sizing time.
        pools = b["allocated_target_kv_pool_bytes"] + b["allocated_draft_kv_pool_bytes"]
        assert b["cuda_torch_allocated_bytes"] >= pools, b
        assert b["rank_free_at_sizing_bytes"] - b["cuda_free_bytes_after_pools"] >= pools, b
    # The tightest rank's pools fill its budget (the others have their extra memory unused):
    # weights, KV and residue leave at most one page per pool (harness.gpu.gpu_verdict).
    (tight_usage,) = [u for b, u in zip(ranks, usages, strict=True) if b is tight]
    assert gpu_verdict.fill_problems(tight_usage, tight) == []
    assert out["meta_info"]["completion_tokens"] > 0
    # On every rank the draft's bindings of after init already held when its pool was sized.
    assert storage_identity.launch_problems(tmp_path / "probe", None) == []
