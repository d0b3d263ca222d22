"""Per-rank memory reports: distinct names, each rank's tightness line, the tightest rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness.reports.report_reading import read_rank_breakdowns
from sglang_specinit import rank_reports


def breakdown(rank: int, free: int | None, *, tokens: int = 1000, **ranks: int) -> dict:
    fields = {"rank_index": rank, "tp_rank": rank, "pp_rank": 0, "dp_rank": 0, "tp_size": 2}
    fields.update(ranks, tokens=tokens, rank_free_at_sizing_bytes=free, tightest_rank=None)
    if free is not None:
        above = free - (100 << 20)
        fields.update(min_free_at_sizing_bytes=100 << 20, free_above_tightest_bytes=above)
        fields["tightest_rank"] = above <= rank_reports.TIGHTEST_TOLERANCE_BYTES
    return fields


def test_every_scheduler_of_dp_pp_tp_gets_its_own_file_name() -> None:
    names = set()
    for replica in range(2):
        for pp in range(2):
            for tp in range(4):
                index = rank_reports.scheduler_rank_index(replica, pp, tp, 2, 4)
                b = {"rank_index": index, "pp_rank": pp, "tp_rank": tp, "dp_rank": replica}
                names.add(rank_reports.breakdown_file_name(b))
    assert len(names) == 16
    assert "memory-rank13-pp1-tp1-dp1.json" in names  # (1 * 2 + 1) * 4 + 1
    # A breakdown without rank fields (one rank) is rank 0.
    assert rank_reports.breakdown_file_name({}) == "memory-rank0-pp0-tp0-dp0.json"


def test_each_rank_line_says_whether_it_is_the_tightest() -> None:
    tight = rank_reports.tightness(breakdown(1, 100 << 20))
    roomy = rank_reports.tightness(breakdown(0, 124 << 20))
    assert tight.startswith("rank 1 (pp0 tp1 dp0) is the tightest rank")
    assert roomy.startswith("rank 0 (pp0 tp0 dp0) is not the tightest rank: 24.00 MiB more free")
    assert "1000 tokens" in tight and "1000 tokens" in roomy
    single = breakdown(0, 100 << 20, tp_size=1)
    assert "(the only rank)" in rank_reports.tightness(single)
    assert "not known" in rank_reports.tightness(breakdown(0, None))


def test_tightest_is_derived_from_the_files_after_the_fact(tmp_path: Path) -> None:
    for b in (breakdown(0, 124 << 20), breakdown(1, 100 << 20), breakdown(2, 110 << 20)):
        (tmp_path / rank_reports.breakdown_file_name(b)).write_text(json.dumps(b))
    (tmp_path / "unrelated.json").write_text("{}")
    found = read_rank_breakdowns(tmp_path)
    assert [b["rank_index"] for b in found] == [0, 1, 2]
    assert rank_reports.tightest(found)["rank_index"] == 1
    with pytest.raises(ValueError, match="different token counts"):
        rank_reports.tightest([breakdown(0, 1 << 30), breakdown(1, 1 << 30, tokens=999)])
    with pytest.raises(ValueError, match="no rank"):
        rank_reports.tightest([])


def test_rank_fields_name_replicas_and_attention_dp_ranks_apart() -> None:
    replica = rank_reports.rank_fields(
        replica=1, pp_rank=0, tp_rank=1, dp_rank=1, attn_tp_rank=1, pp_size=1, tp_size=2, dp_size=2
    )
    attention_dp = rank_reports.rank_fields(
        replica=0, pp_rank=0, tp_rank=1, dp_rank=1, attn_tp_rank=0, pp_size=1, tp_size=2, dp_size=2
    )
    assert rank_reports.breakdown_file_name(replica) == "memory-rank3-pp0-tp1-dp1.json"
    assert rank_reports.breakdown_file_name(attention_dp) == "memory-rank1-pp0-tp1-dp1.json"
    assert attention_dp["attn_tp_rank"] == 0 and attention_dp["dp_size"] == 2


def test_tightness_fields_from_a_ranks_own_reading_and_the_minimum() -> None:
    mib = 1 << 20
    roomy = rank_reports.tightness_fields(124 * mib, 100 * mib)
    assert roomy == {
        "rank_free_at_sizing_bytes": 124 * mib,
        "min_free_at_sizing_bytes": 100 * mib,
        "free_above_tightest_bytes": 24 * mib,
        "tightest_rank": False,
    }
    # Within the tolerance (float32 minimum, context buffers) a rank counts as the tightest.
    tolerance = rank_reports.TIGHTEST_TOLERANCE_BYTES
    near = rank_reports.tightness_fields(100 * mib + tolerance, 100 * mib)
    assert near["tightest_rank"] is True
    assert rank_reports.tightness_fields(None, 100 * mib)["tightest_rank"] is None
    assert rank_reports.tightness_fields(100 * mib, None)["rank_free_at_sizing_bytes"] is None


def test_write_breakdown_leaves_only_the_named_file(tmp_path: Path) -> None:
    b = breakdown(1, 100 << 20)
    path = rank_reports.write_breakdown(tmp_path, b)
    assert path.name == "memory-rank1-pp0-tp1-dp0.json"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    assert read_rank_breakdowns(tmp_path) == [b]
