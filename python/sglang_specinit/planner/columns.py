"""One release's stock column beside this package's: the two-column report.

Every column is a prediction a live launch of that release confirms. In an environment the
report is the installed release's stock column and this package's: the release's own sizing
code where the replay runs it (``OfflinePlan.release_stock``), else the replay's modelled stock
column; another release's rule only where ``--sglang-version`` asks for it. The serving
adapter's ``planner_replay.stock_beside`` builds the pair
(:func:`sglang_specinit.planner.releases.stock_beside`); an adapter that answers None leaves
the three modelled columns (``OfflinePlan.columns``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglang_specinit.planner.gpus import GIB
from sglang_specinit.planner.plan import OfflinePlan, plan_json
from sglang_specinit.report import ReportColumn, render_table


@dataclass(frozen=True)
class StockBeside:
    """A release's stock column beside this package's, for one offline plan."""

    base: OfflinePlan
    stock: ReportColumn
    # The release the stock column is (its title, the --json key and sglang_version).
    release: str
    # The stock column's --json key where it is not ``stock_<release>`` (a key the report
    # already knows by another spelling).
    json_key: str | None = None

    @property
    def columns(self) -> tuple[ReportColumn, ReportColumn]:
        return (self.stock, self.base.ours)

    @property
    def stock_key(self) -> str:
        return self.json_key or f"stock_{self.release.replace('.', '_')}"


def stock_beside_json(plan: StockBeside) -> dict[str, Any]:
    """``--json``: this package's plan at top level, the stock column as ``stock_<release>``
    (``stock_0_5_23``, ``stock_0_5_22`` ...) and its release as ``sglang_version``; the
    three-column report's modelled sub-objects are left out."""
    data = plan_json(plan.base)
    for key in plan.base.modelled_keys:
        data.pop(key, None)
    data[plan.stock_key] = plan.stock.to_dict(plan.base.tp_size)
    data["sglang_version"] = plan.release
    return data


def stock_beside_text(plan: StockBeside) -> str:
    """The table and its notes, as ``plan`` prints them."""
    base = plan.base
    device = base.device
    lines = [
        f"model:  {base.model_path}",
        f"draft:  {base.draft_model_path or '-'}  (--speculative-algorithm {base.algorithm})",
        f"device: {device.name}, {device.total_bytes / GIB:.2f} GiB total, "
        f"{device.pre_load_free_bytes / GIB:.2f} GiB free before weights load; "
        f"tp {base.tp_size}; bytes per TP rank; sglang {plan.release}",
        "",
        render_table(plan.columns, base.tp_size),
    ]
    if base.target_buffers.bytes:
        lines.append(f"* {base.target_buffers.line()}")
    # Notes about the three-column report's modelled upstream rule do not apply here.
    upstream_release = base.upstream.title.split()[-1]
    lines += [f"* {note}" for note in base.notes if upstream_release not in note]
    return "\n".join(lines)
