"""One memory breakdown, two readers: ``sglang-specinit plan --json`` and the server's init log.

Both build their dict with :func:`plan_to_dict`, so a tool can compare a live server's
``SPECINIT_MEMORY`` log line with the plan key by key. All byte values are per TP rank.
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.budget import GIB, BudgetInputs, PoolPlan

# Keys every breakdown carries (the plan's JSON and the server's log line alike).
BREAKDOWN_KEYS = (
    "tokens",
    "max_running_requests",
    "page_size",
    "tp_size",
    "pre_load_free_bytes",
    "budget_bytes",
    "target_weight_bytes",
    "draft_weight_bytes",
    "resident_bytes",
    "target_kv_bytes_per_token",
    "draft_kv_bytes_per_token",
    "target_kv_pool_bytes",
    "draft_kv_pool_bytes",
    "used_bytes",
    "headroom_bytes",
    "min_viable_mem_fraction_static",
)


def plan_to_dict(plan: PoolPlan, inputs: BudgetInputs, tp_size: int) -> dict[str, Any]:
    """The breakdown of one rule's plan; byte counts are ints."""
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
        "target_kv_pool_bytes": int(plan.target_kv_pool_bytes),
        "draft_kv_pool_bytes": int(plan.draft_kv_pool_bytes),
        "used_bytes": int(plan.used_bytes),
        "headroom_bytes": int(plan.headroom_bytes),
        "min_viable_mem_fraction_static": round(plan.min_viable_mem_fraction_static, 6),
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


ROWS = (
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
    ("headroom", "headroom_bytes", human_bytes),
    ("min viable --mem-fraction-static", "min_viable_mem_fraction_static", lambda v: f"{v:.4f}"),
)


def render_columns(columns: dict[str, dict[str, Any]]) -> str:
    """A fixed-width table: one row per quantity, one column per named breakdown."""
    names = list(columns)
    label_width = max(len(label) for label, _, _ in ROWS)
    cells = [[fmt(columns[name][key]) for name in names] for _, key, fmt in ROWS]
    widths = [max(len(name), *(len(row[i]) for row in cells)) for i, name in enumerate(names)]
    lines = [
        " " * label_width
        + "  "
        + "  ".join(n.rjust(w) for n, w in zip(names, widths, strict=True)),
    ]
    for (label, _, _), row in zip(ROWS, cells, strict=True):
        lines.append(
            label.ljust(label_width)
            + "  "
            + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True))
        )
    return "\n".join(lines)


def render_breakdown(breakdown: dict[str, Any]) -> str:
    """The server's post-init table: planned values next to what was really allocated."""
    allocated = dict(breakdown)
    allocated["target_kv_pool_bytes"] = breakdown.get("allocated_target_kv_pool_bytes", 0)
    allocated["draft_kv_pool_bytes"] = breakdown.get("allocated_draft_kv_pool_bytes", 0)
    allocated["used_bytes"] = (
        breakdown["resident_bytes"]
        + allocated["target_kv_pool_bytes"]
        + allocated["draft_kv_pool_bytes"]
    )
    allocated["headroom_bytes"] = breakdown["budget_bytes"] - allocated["used_bytes"]
    return render_columns({"planned": breakdown, "allocated": allocated})
