"""The report directory: ``README.md`` (per case its figure and tables), ``report.json`` (every
number shown) and, when matplotlib imports, ``<case>.png`` / ``<case>.svg``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglang_specinit.planner import report_figures
from sglang_specinit.planner.report_cases import ReportCase, Variant
from sglang_specinit.report import human_bytes

PAGE_NAME = "README.md"
DATA_NAME = "report.json"


@dataclass
class ReportResult:
    """What :func:`write_report` wrote, and why figures are missing if they are."""

    page: Path
    figures: list[Path] = field(default_factory=list)
    figures_skipped: str | None = None


def _headroom(variant: Variant) -> str:
    headroom = variant.budget_bytes - variant.stacked_bytes
    if headroom < 0:
        return f"**OVER by {human_bytes(-headroom)}**"
    return human_bytes(headroom)


def _row(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _header(columns: Sequence[str]) -> list[str]:
    return [_row(columns), _row(["---"] + ["---:"] * (len(columns) - 1))]


# fmt: off
VARIANT_COLUMNS = (
    "variant", "source", "--mem-fraction-static", "tokens", "max running requests",
    "target weights", "draft weights", "target KV", "draft KV", "used", "budget", "headroom",
)
# fmt: on
_POOLS = ("target_kv_pool_bytes", "draft_kv_pool_bytes")


def variant_table(case: ReportCase) -> list[str]:
    """Tokens, max running requests and the bar's bytes, one row per variant."""
    lines = _header(VARIANT_COLUMNS)
    for v in case.variants:
        b = v.breakdown
        fraction = b.get("mem_fraction_static")
        fraction = f"{fraction:.3f}" if isinstance(fraction, (int, float)) else "-"
        weights = ("target_weight_bytes", "draft_weight_bytes")
        sizes = [b[k] for k in (*weights, *_POOLS)] + [v.stacked_bytes, v.budget_bytes]
        cells = [v.title, v.source or "planned", fraction, b["tokens"]]
        cells += [b.get("max_running_requests", "-"), *map(human_bytes, sizes), _headroom(v)]
        lines.append(_row(cells))
    return lines


# fmt: off
RANK_COLUMNS = (
    "rank", "tokens", "max running requests", "target KV planned", "target KV allocated",
    "draft KV planned", "draft KV allocated", "allocated - planned", "budget",
    "headroom (allocated)",
)
# fmt: on


def rank_table(case: ReportCase) -> list[str]:
    """Live servers: the planned pools next to those SGLang allocated, per rank."""
    lines = _header(RANK_COLUMNS)
    by_key = {v.key: v for v in case.variants}
    for rank in case.ranks:
        allocated = by_key[f"rank{rank}-allocated"]
        p, a = by_key[f"rank{rank}-planned"].breakdown, allocated.breakdown
        delta = sum(a[k] for k in _POOLS) - sum(p[k] for k in _POOLS)
        pools = [human_bytes(x[k]) for k in _POOLS for x in (p, a)]
        cells = [rank, p["tokens"], p.get("max_running_requests", "-"), *pools, f"{delta:+d} B"]
        lines.append(_row([*cells, human_bytes(allocated.budget_bytes), _headroom(allocated)]))
    return lines


def case_section(case: ReportCase, figures: bool) -> list[str]:
    # An explicit anchor: GitHub derives heading anchors by its own rules, not ours.
    lines = [f'<a id="{case.slug}"></a>', "", f"## {case.name}", ""]
    if case.description:
        lines += [case.description, ""]
    if figures:
        lines += [f"![{case.name}]({case.slug}.png)", "", f"[SVG]({case.slug}.svg)", ""]
    lines += [*variant_table(case), ""]
    if case.kind == "live":
        lines += ["Planned against allocated, per rank:", "", *rank_table(case), ""]
    notes = [*case.notes]
    notes += [f"{v.title}: {v.source_note}" for v in case.variants if v.source_note]
    lines += [f"* {n}" for n in notes]
    if notes:
        lines.append("")
    return lines


INTRO = (
    "Bytes per TP rank. Each bar stacks target weights, draft weights, target KV and draft KV "
    "(plus other resident bytes and draft buffers where the input has them) under the unused "
    "rest of the budget; the dashed line is the budget (`--mem-fraction-static` x free memory "
    "before loading), and what goes above it is drawn in hatched red and marked OVER. "
    "`measured` cells come from real SGLang runs, `modelled` cells from a release's sizing "
    "rule applied to the same inputs, `planned` cells from the planner or the server's plan."
)


def render_page(
    cases: Sequence[ReportCase],
    figures: bool,
    figures_skipped: str | None = None,
    skipped_cases: Mapping[str, str] | None = None,
) -> str:
    """The page; ``skipped_cases`` (name -> why) are listed in the index, without a section."""
    lines = ["# sglang-specinit memory report", "", INTRO, ""]
    if figures_skipped:
        lines += [f"> Figures: {figures_skipped}", ""]
    lines += ["| case | kind | variants, or why it was skipped |", "| --- | --- | --- |"]
    lines += [
        f"| [{c.name}](#{c.slug}) | {c.kind} | {', '.join(v.title for v in c.variants)} |"
        for c in cases
    ]
    lines += [f"| {name} | skipped | {why} |" for name, why in (skipped_cases or {}).items()]
    lines.append("")
    for case in cases:
        lines += case_section(case, figures)
    return "\n".join(lines).rstrip() + "\n"


def report_data(cases: Sequence[ReportCase]) -> dict[str, Any]:
    """Every number the page and figures show, keyed by case slug and variant key."""
    return {
        case.slug: {
            "name": case.name,
            "kind": case.kind,
            "source_path": case.source_path,
            "variants": [
                {
                    "key": v.key,
                    "title": v.title,
                    "source": v.source,
                    "tokens": v.breakdown["tokens"],
                    "max_running_requests": v.breakdown.get("max_running_requests"),
                    "budget_bytes": v.budget_bytes,
                    "segments": {s.label: s.bytes for s in v.segments()},
                    "unused_bytes": v.unused_bytes,
                    "over_bytes": v.over_bytes,
                }
                for v in case.variants
            ],
        }
        for case in cases
    }


def write_report(
    cases: Sequence[ReportCase], out_dir: Path, skipped_cases: Mapping[str, str] | None = None
) -> ReportResult:
    """Write the page, its data and (when matplotlib imports) the figures into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    skipped = report_figures.matplotlib_missing()
    figures: list[Path] = []
    if skipped is None:
        for case in cases:
            figures += report_figures.save_case_figures(case, out_dir)
    page = out_dir / PAGE_NAME
    page.write_text(render_page(cases, skipped is None, skipped, skipped_cases))
    data = json.dumps(report_data(cases), indent=1, sort_keys=True)
    (out_dir / DATA_NAME).write_text(data + "\n")
    return ReportResult(page=page, figures=figures, figures_skipped=skipped)
