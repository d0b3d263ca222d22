"""One memory breakdown for ``sglang-specinit plan`` and the server's log, so the two compare key
by key; bytes per attention-TP rank."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sglang_specinit.budget import GIB, BudgetInputs, PoolPlan


def plan_to_dict(plan: PoolPlan, inputs: BudgetInputs, tp_size: int) -> dict[str, Any]:
    """Per-token values truncated: hybrid-SWA cells are fractional."""
    return {
        "rule": plan.rule,
        "tokens": plan.tokens,
        "max_running_requests": plan.max_running_requests,
        "page_size": plan.page_size,
        "tp_size": tp_size,
        "mem_fraction_static": inputs.mem_fraction_static,
        "pre_load_free_bytes": int(inputs.pre_load_free_bytes),
        "budget_bytes": int(plan.budget_bytes),
        "target_weight_bytes": int(plan.target_weight_bytes),
        "draft_weight_bytes": int(plan.draft_weight_bytes),
        "resident_bytes": int(plan.resident_bytes),
        "target_kv_bytes_per_token": int(plan.target_kv_bytes_per_token),
        "draft_kv_bytes_per_token": int(plan.draft_kv_bytes_per_token),
        "priced_kv_bytes_per_token": int(plan.priced_bytes_per_token),
        "target_kv_pool_bytes": int(plan.target_kv_pool_bytes),
        "draft_kv_pool_bytes": int(plan.draft_kv_pool_bytes),
        "draft_request_bytes": int(plan.draft_request_bytes),
        "draft_fixed_pool_bytes": int(plan.draft_fixed_bytes),
        "used_bytes": int(plan.used_bytes),
        "headroom_bytes": int(plan.headroom_bytes),
        "min_viable_mem_fraction_static": round(plan.min_viable_mem_fraction_static, 6),
        "suggested_mem_fraction_static": plan.suggested_mem_fraction_static,
    }


def human_bytes(n: float) -> str:
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n >= GIB:
        return f"{sign}{n / GIB:.2f} GiB"
    if n >= 1 << 20:
        return f"{sign}{n / (1 << 20):.2f} MiB"
    if n >= 1 << 10:
        return f"{sign}{n / (1 << 10):.2f} KiB"
    return f"{sign}{n:.0f} B"


Row = tuple[str, str, Callable[[Any], str]]

ROWS: tuple[Row, ...] = (
    ("target weights", "target_weight_bytes", human_bytes),
    ("draft weights", "draft_weight_bytes", human_bytes),
    ("target KV / token", "target_kv_bytes_per_token", lambda v: f"{v} B"),
    ("draft KV / token", "draft_kv_bytes_per_token", lambda v: f"{v} B"),
    ("tokens", "tokens", str),
    ("max running requests", "max_running_requests", str),
    ("target KV pool", "target_kv_pool_bytes", human_bytes),
    ("draft KV pool", "draft_kv_pool_bytes", human_bytes),
    ("budget (f x free)", "budget_bytes", human_bytes),
    ("used", "used_bytes", human_bytes),
    ("headroom", "headroom_bytes", lambda v: human_bytes(v) + (" (over budget)" if v < 0 else "")),
    ("min viable --mem-fraction-static", "min_viable_mem_fraction_static", lambda v: f"{v:.4f}"),
)

RULE_ROWS: tuple[Row, ...] = (
    ("--mem-fraction-static", "mem_fraction_static", lambda v: f"{v:.3f}"),
    *ROWS[:4],
    ("KV / token priced by rule", "priced_kv_bytes_per_token", lambda v: f"{v} B"),
    *ROWS[4:],
    ("auto-fraction draft reserve", "spec_reserve_bytes", human_bytes),
    (
        "reserve minus draft bytes",
        "spec_reserve_balance_bytes",
        lambda v: f"{human_bytes(v)} (unused)" if v >= 0 else f"{human_bytes(v)} (short)",
    ),
)


def render_columns(columns: Mapping[str, Mapping[str, Any]], rows: Sequence[Row] = ROWS) -> str:
    """One row per quantity some column carries, one column per breakdown."""
    names = list(columns)
    present = [r for r in rows if any(columns[n].get(r[1]) is not None for n in names)]
    label_width = max(len(label) for label, _, _ in present)
    cells = [
        [fmt(columns[n][key]) if columns[n].get(key) is not None else "-" for n in names]
        for _, key, fmt in present
    ]
    widths = [max(len(name), *(len(row[i]) for row in cells)) for i, name in enumerate(names)]

    def line(label: str, row: Sequence[str]) -> str:
        padded = (c.rjust(w) for c, w in zip(row, widths, strict=True))
        return "  ".join([label.ljust(label_width), *padded])

    rows_text = [line(label, row) for (label, _, _), row in zip(present, cells, strict=True)]
    return "\n".join([line("", names), *rows_text])


def render_breakdown(breakdown: dict[str, Any]) -> str:
    keys = ("target_kv_pool_bytes", "draft_kv_pool_bytes")
    pools = {key: breakdown.get(f"allocated_{key}", 0) for key in keys}
    used = breakdown["resident_bytes"] + pools[keys[0]] + pools[keys[1]]
    headroom = breakdown["budget_bytes"] - used
    allocated = {**breakdown, **pools, "used_bytes": used, "headroom_bytes": headroom}
    return render_columns({"planned": breakdown, "allocated": allocated})


@dataclass(frozen=True)
class ReportColumn:
    """``spec_reserve_bytes``: what the older generation's automatic fraction holds back for
    the draft; None where no such reserve applies."""

    title: str
    plan: PoolPlan
    inputs: BudgetInputs
    spec_reserve_bytes: int | None = None

    def to_dict(self, tp_size: int) -> dict[str, Any]:
        data = plan_to_dict(self.plan, self.inputs, tp_size)
        if self.spec_reserve_bytes is not None:
            # Draft bytes outside stock's budget (its graphs and workspaces not counted).
            outside = (
                self.plan.used_bytes
                - self.plan.target_weight_bytes
                - self.plan.target_kv_pool_bytes
            )
            data["spec_reserve_bytes"] = self.spec_reserve_bytes
            data["spec_reserve_balance_bytes"] = self.spec_reserve_bytes - outside
        return data
