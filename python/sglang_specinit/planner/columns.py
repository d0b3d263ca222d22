"""What ``plan`` prints: the installed release's stock column beside this package's
(``--json``'s keys: docs/planner.md)."""

from __future__ import annotations

from typing import Any

from sglang_specinit.planner.gpus import GIB
from sglang_specinit.planner.plan import OfflinePlan
from sglang_specinit.report import RULE_ROWS, render_columns

# ``--json``'s key of the stock column, and what its figures come from (whatever the release).
STOCK_KEY = "stock"
STOCK_RULE = "the release's own sizing code"
# A note's ``column``: one of the two, or both (a note on the launch's inputs).
OURS_COLUMN = "sglang-specinit"
BOTH_COLUMNS = "both"


def plan_notes(plan: OfflinePlan) -> list[dict[str, str]]:
    """Every note of the plan, each with the column it belongs to, in the order text prints."""
    notes = [{"column": STOCK_KEY, "text": n} for n in plan.stock.plan.notes]
    notes += [{"column": OURS_COLUMN, "text": n} for n in plan.ours.plan.notes]
    shared = [plan.target_buffers.line()] if plan.target_buffers.bytes else []
    notes += [{"column": BOTH_COLUMNS, "text": n} for n in (*shared, *plan.notes)]
    return notes


def plan_json(plan: OfflinePlan) -> dict[str, Any]:
    """``--json``: this package's plan at top level, stock's under ``stock``, and the notes."""
    data = plan.ours.to_dict(plan.tp_size)
    stock = plan.stock.to_dict(plan.tp_size)
    stock.update({"release": plan.release, "rule": STOCK_RULE})
    data[STOCK_KEY] = stock
    data["sglang_version"] = plan.release
    data["device"] = {"name": plan.device.name, "total_bytes": plan.device.total_bytes}
    data["speculative_algorithm"] = plan.algorithm
    data["model_path"] = plan.model_path
    data["speculative_draft_model_path"] = plan.draft_model_path
    data["target_buffers"] = plan.target_buffers.to_dict()
    data["notes"] = plan_notes(plan)
    return data


def plan_text(plan: OfflinePlan) -> str:
    """The table and its notes, each note led by its column."""
    device, columns = plan.device, (plan.stock, plan.ours)
    lines = [
        f"model:  {plan.model_path}",
        f"draft:  {plan.draft_model_path or '-'}  (--speculative-algorithm {plan.algorithm})",
        f"device: {device.name}, {device.total_bytes / GIB:.2f} GiB total, "
        f"{device.pre_load_free_bytes / GIB:.2f} GiB free before weights load; "
        f"tp {plan.tp_size}; bytes per TP rank; sglang {plan.release}",
        "",
        render_columns({c.title: c.to_dict(plan.tp_size) for c in columns}, RULE_ROWS),
    ]
    # Each note led by its column's name: the stock column's table header, or "both columns".
    labels = {STOCK_KEY: plan.stock.title, BOTH_COLUMNS: "both columns"}
    lines += [f"* {labels.get(n['column'], n['column'])}: {n['text']}" for n in plan_notes(plan)]
    return "\n".join(lines)
