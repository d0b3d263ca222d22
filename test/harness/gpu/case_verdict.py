"""Every verdict of one GPU case, from what its plugin-on and stock launches left behind."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.gpu import gpu_verdict, spec_metrics, storage_identity
from harness.gpu.gpu_verdict import GraphCapture
from harness.reports.device_probe import BOOKKEEPING_TOLERANCE_BYTES, UsageAfterPools

# The checks, in the order a reader follows a case.
CHECKS = (
    "breakdown",
    "memory",
    "storage_identity",
    "tokens",
    "graphs",
    "batch_lists",
    "greedy",
    "verify_counts",
    "acceptance",
)


@dataclass
class Launch:
    """What one launch left (stock: no breakdowns, and a ``control`` repeat of its answers)."""

    info: Mapping[str, Any]
    responses: Sequence[Mapping[str, Any]]
    capture: GraphCapture
    usages: Sequence[UsageAfterPools]
    breakdowns: Sequence[Mapping[str, Any]] = ()
    control: Sequence[Mapping[str, Any]] | None = None


@dataclass
class CaseEvidence:
    """One case: both launches, the plugin launch's storage-identity snapshots per process."""

    prompts: Sequence[str]
    tp: int
    expect_draft: str | None
    plugin: Launch
    stock: Launch
    identity: Sequence[Mapping[str, list[Mapping[str, Any]]]] = ()
    stock_after_init: Mapping[str, Any] | None = None
    # 0.5.23's post-capture KV sizing: the server may serve fewer tokens than planned.
    resized_after_capture: bool = False
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def stock_fits(self) -> bool:
        return all(u.over_budget_bytes <= BOOKKEEPING_TOLERANCE_BYTES for u in self.stock.usages)


def breakdown_problems(launch: Launch, tp: int, *, resized: bool = False) -> list[str]:
    """One breakdown per rank, serving the count it planned (``resized``: at most that)."""
    ranks = [b["tp_rank"] for b in launch.breakdowns]
    if ranks != list(range(tp)):
        return [
            f"plugin breakdowns for TP ranks {ranks}, expected {list(range(tp))}: the plugin did "
            "not size this launch (stepped aside without a warning, or never loaded)"
        ]
    if len(launch.usages) != tp:
        return [f"{len(launch.usages)} probed schedulers for TP {tp}"]
    planned, served = launch.breakdowns[0]["tokens"], launch.info["max_total_num_tokens"]
    if served == planned or (resized and served < planned):
        return []
    return [f"planned {planned} tokens, the server serves {served}"]


def token_problems(evidence: CaseEvidence) -> list[str]:
    plugin = int(evidence.plugin.info["max_total_num_tokens"])
    stock = int(evidence.stock.info["max_total_num_tokens"])
    if evidence.stock_fits and plugin < stock:
        return [
            f"plugin-on serves {plugin} tokens, stock {stock} within the same budget "
            f"({plugin / stock:.3f} x): worse than stock"
        ]
    return []


def case_problems(e: CaseEvidence) -> dict[str, list[str]]:
    plugin, stock = e.plugin, e.stock
    breakdown = breakdown_problems(plugin, e.tp, resized=e.resized_after_capture)
    memory: list[str] = []
    if not breakdown:
        for b, usage in zip(plugin.breakdowns, plugin.usages, strict=True):
            # TP > 1 ranks are measured against the smallest rank's reading: fill at TP 1 only.
            memory += gpu_verdict.memory_problems(b, usage, fill=e.tp == 1)
    identity = [
        p
        for snapshots in e.identity
        for p in storage_identity.identity_problems(snapshots, e.stock_after_init)
    ]
    if not e.identity:
        identity = ["no storage-identity records"]
    graphs = gpu_verdict.graph_problems(plugin.capture, plugin.info, e.expect_draft)
    graphs += [
        f"stock: {p}" for p in gpu_verdict.graph_problems(stock.capture, stock.info, e.expect_draft)
    ]
    graphs += gpu_verdict.same_graph_kinds(plugin.capture, stock.capture)
    greedy = gpu_verdict.greedy_verdict(e.prompts, plugin.responses, stock.responses, stock.control)
    e.notes.update(greedy_ties=greedy.ties, stock_control_differences=greedy.control)
    on = spec_metrics.summed(plugin.responses)
    off = spec_metrics.summed(stock.responses)
    return {
        "breakdown": breakdown,
        "memory": memory,
        "storage_identity": identity,
        "tokens": token_problems(e),
        "graphs": graphs,
        "batch_lists": gpu_verdict.batch_list_problems(
            plugin.info, stock.info, plugin.capture, stock.capture
        ),
        "greedy": greedy.problems,
        "verify_counts": gpu_verdict.verify_count_problems(
            e.prompts, plugin.responses, stock.responses, stock.control
        ),
        "acceptance": gpu_verdict.acceptance_problems(on, off),
    }


def failing_checks(e: CaseEvidence) -> list[str]:
    return [name for name, problems in case_problems(e).items() if problems]
