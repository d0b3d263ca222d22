"""What ``plan`` prints: the installed release's stock column beside this package's.

Both columns are predictions a live launch of that release confirms: stock by the release's own
sizing code, this package's by its budget model on the same prices (:mod:`.plan`). Another
release's stock column comes from that release's own environment (``report --beside VENV``).
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.planner.gpus import GIB
from sglang_specinit.planner.plan import OfflinePlan
from sglang_specinit.report import render_table


def plan_json(plan: OfflinePlan) -> dict[str, Any]:
    """``--json``: this package's plan at top level, the stock column under its key
    (``stock_0_5_23`` ...) and the release as ``sglang_version``."""
    data = plan.ours.to_dict(plan.tp_size)
    data[plan.stock_key] = plan.stock.to_dict(plan.tp_size)
    data["sglang_version"] = plan.release
    data["device"] = {"name": plan.device.name, "total_bytes": plan.device.total_bytes}
    data["speculative_algorithm"] = plan.algorithm
    data["model_path"] = plan.model_path
    data["speculative_draft_model_path"] = plan.draft_model_path
    data["target_buffers"] = plan.target_buffers.to_dict()
    data["plan_notes"] = list(plan.notes)
    return data


def plan_text(plan: OfflinePlan) -> str:
    """The table and its notes."""
    device = plan.device
    lines = [
        f"model:  {plan.model_path}",
        f"draft:  {plan.draft_model_path or '-'}  (--speculative-algorithm {plan.algorithm})",
        f"device: {device.name}, {device.total_bytes / GIB:.2f} GiB total, "
        f"{device.pre_load_free_bytes / GIB:.2f} GiB free before weights load; "
        f"tp {plan.tp_size}; bytes per TP rank; sglang {plan.release}",
        "",
        render_table(plan.columns, plan.tp_size),
    ]
    if plan.target_buffers.bytes:
        lines.append(f"* {plan.target_buffers.line()}")
    lines += [f"* {note}" for note in plan.notes]
    return "\n".join(lines)
