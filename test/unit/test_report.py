"""The shared breakdown: dict keys and types, the rules table, the planned/allocated table."""

from __future__ import annotations

from sglang_specinit.budget import (
    BudgetInputs,
    DraftSpec,
    plan_pools,
    stock_0_5_13_plan,
)
from sglang_specinit.report import (
    BREAKDOWN_KEYS,
    ReportColumn,
    human_bytes,
    plan_to_dict,
    render_breakdown,
    render_table,
)
from sglang_specinit.specs import attention_kv_spec

GIB = 1 << 30
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
    stock = ReportColumn("stock", stock_0_5_13_plan(stock_inputs), stock_inputs, 4 * GIB)
    ours = ReportColumn("ours", plan_pools(INPUTS), INPUTS)
    table = render_table([stock, ours])
    lines = table.splitlines()
    assert lines[0].split() == ["stock", "ours"]
    reserve = next(line for line in lines if line.startswith("auto-fraction draft reserve"))
    assert reserve.split()[-3:] == ["4.00", "GiB", "-"]
    assert any("(over budget)" in line for line in lines if line.startswith("headroom"))
    assert lines[-1].startswith("* stock:")  # the stock rule's note


def test_runtime_breakdown_table() -> None:
    breakdown = plan_to_dict(plan_pools(INPUTS), INPUTS, tp_size=1)
    breakdown["allocated_target_kv_pool_bytes"] = breakdown["target_kv_pool_bytes"]
    breakdown["allocated_draft_kv_pool_bytes"] = breakdown["draft_kv_pool_bytes"]
    lines = render_breakdown(breakdown).splitlines()
    assert lines[0].split() == ["planned", "allocated"]
    used = next(line for line in lines if line.startswith("used"))
    planned, allocated = used.split()[1:3], used.split()[3:5]
    assert planned == allocated
