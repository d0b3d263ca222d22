"""The shared breakdown: dict keys and types, the rules table, the planned/allocated table."""

from __future__ import annotations

import re

from harness.geometry.specs import attention_kv_spec
from harness.reports.report_reading import BREAKDOWN_KEYS
from sglang_specinit.budget import (
    BudgetInputs,
    DraftSpec,
    make_plan,
    plan_pools,
)
from sglang_specinit.report import (
    ReportColumn,
    human_bytes,
    plan_to_dict,
    render_breakdown,
    render_table,
)

GIB = 1 << 30
MIB = 1 << 20
INPUTS = BudgetInputs(
    pre_load_free_bytes=80 * GIB,
    mem_fraction_static=0.8,
    target_kv=attention_kv_spec(num_layers=32, num_kv_heads=8, head_dim=128, v_head_dim=128),
    target_weight_bytes=16 * GIB,
    draft=DraftSpec(
        algorithm="EAGLE",
        kv_pools=(attention_kv_spec(num_layers=1, num_kv_heads=8, head_dim=128, v_head_dim=128),),
        weight_bytes=GIB,
        upstream_reserved_layers=1,
    ),
)


def test_plan_to_dict_keys_and_types() -> None:
    data = plan_to_dict(plan_pools(INPUTS), INPUTS, tp_size=2)
    assert set(BREAKDOWN_KEYS) <= set(data)
    for key in BREAKDOWN_KEYS:
        expected = float if key == "min_viable_mem_fraction_static" else int
        assert type(data[key]) is expected, key
    assert data["tp_size"] == 2
    assert data["budget_bytes"] == 64 * GIB  # 0.8 * 80 GiB
    assert data["mem_fraction_static"] == 0.8


def test_human_bytes() -> None:
    assert human_bytes(1.5 * GIB) == "1.50 GiB"
    assert human_bytes(-3 * (1 << 20)) == "-3.00 MiB"
    assert human_bytes(4096) == "4.00 KiB"
    assert human_bytes(12) == "12 B"


def test_rules_table_shows_reserve_only_where_present() -> None:
    stock_inputs = BudgetInputs(**{**INPUTS.__dict__, "mem_fraction_static": 0.75})
    # A stock that sizes the target's pool alone (44 GiB // 131072) and puts the draft on top.
    plan = make_plan("stock", stock_inputs, 360448, 17 * GIB, 131072, 0.2, ("draft on top",))
    stock = ReportColumn("stock", plan, stock_inputs, 4 * GIB)
    ours = ReportColumn("ours", plan_pools(INPUTS), INPUTS)
    table = render_table([stock, ours])
    lines = table.splitlines()
    assert lines[0].split() == ["stock", "ours"]
    reserve = next(line for line in lines if line.startswith("auto-fraction draft reserve"))
    assert reserve.split()[-3:] == ["4.00", "GiB", "-"]
    assert any("(over budget)" in line for line in lines if line.startswith("headroom"))
    assert lines[-1].startswith("* stock:")  # the stock rule's note


def _rows(table: str) -> dict[str, list[str]]:
    """``label -> cells`` of a rendered table (columns are two or more spaces apart)."""
    rows = {}
    for line in table.splitlines()[1:]:
        label, *cells = re.split(r" {2,}", line.strip())
        rows[label] = cells
    return rows


def test_runtime_breakdown_table() -> None:
    breakdown = plan_to_dict(plan_pools(INPUTS), INPUTS, tp_size=1)
    # SGLang allocated less than planned: 1 GiB less target KV, 256 MiB less draft KV.
    target_pool = breakdown["target_kv_pool_bytes"] - GIB
    draft_pool = breakdown["draft_kv_pool_bytes"] - 256 * MIB
    breakdown["allocated_target_kv_pool_bytes"] = target_pool
    breakdown["allocated_draft_kv_pool_bytes"] = draft_pool
    table = render_breakdown(breakdown)
    assert table.splitlines()[0].split() == ["planned", "allocated"]
    rows = _rows(table)
    allocated_used = breakdown["resident_bytes"] + target_pool + draft_pool
    expected = {
        "target KV pool": (breakdown["target_kv_pool_bytes"], target_pool),
        "draft KV pool": (breakdown["draft_kv_pool_bytes"], draft_pool),
        "used": (breakdown["used_bytes"], allocated_used),
        "headroom": (breakdown["headroom_bytes"], breakdown["budget_bytes"] - allocated_used),
    }
    for label, (planned, allocated) in expected.items():
        assert planned != allocated, label
        assert rows[label] == [human_bytes(planned), human_bytes(allocated)], label
    # The planned used is what the plan says; the allocated one is 1.25 GiB less.
    assert breakdown["used_bytes"] - allocated_used == GIB + 256 * MIB
    # Rows the allocation does not change show the plan in both columns.
    assert rows["tokens"] == [str(breakdown["tokens"])] * 2
    assert rows["target weights"] == [human_bytes(breakdown["target_weight_bytes"])] * 2
