"""Stacked-bar figures of ``sglang-specinit report`` (matplotlib, the optional ``[report]`` extra):
a bar per variant up to its budget line, what goes over it hatched red with gid ``over:<key>``.
matplotlib is imported only where a figure is drawn; sizes are fixed per bar count."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from sglang_specinit.planner.report_cases import (
    DRAFT_BUFFERS,
    DRAFT_KV,
    DRAFT_WEIGHTS,
    OTHER_RESIDENT,
    OVER,
    SPECINIT_KEY,
    TARGET_KV,
    TARGET_WEIGHTS,
    UNUSED,
    ReportCase,
    Variant,
)
from sglang_specinit.report import human_bytes

DPI = 100
HEIGHT_IN = 4.8
MIN_WIDTH_IN = 8.0
INCH_PER_BAR = 1.3
# Fixed margins (inches) so the figure size never depends on text extents.
LEFT_IN, RIGHT_IN, BOTTOM_IN, TOP_IN = 0.9, 2.1, 1.3, 0.9
BAR_WIDTH = 0.6
# The axis is cut above a shared base over this share of the tallest bar, keeping a stub of it.
CUT_ABOVE_SHARE = 0.5
BASE_STUB_SHARE = 0.25
INSTALL_HINT = "pip install 'sglang-specinit[report]' (or: pip install matplotlib)"

COLOURS = {
    TARGET_WEIGHTS: "#3b5b92",
    DRAFT_WEIGHTS: "#8fa9d6",
    OTHER_RESIDENT: "#a0a0a0",
    TARGET_KV: "#3a8d4f",
    DRAFT_KV: "#9ed39f",
    DRAFT_BUFFERS: "#d6c36a",
    UNUSED: "#ffffff",
    # Saturated red, hatched and labelled: visible in print and to most colour-blind readers.
    OVER: "#ff1a1a",
}
# Bar edges; the unused rest and what goes over the budget are hatched (so is their legend).
_SEGMENT_STYLE: dict[str, Any] = {"edgecolor": "#303030", "linewidth": 0.4}
_BAR_STYLES: dict[str, dict[str, Any]] = {
    UNUSED: {"edgecolor": "#909090", "hatch": "..", "linewidth": 0.6},
    OVER: {"edgecolor": "black", "hatch": "///", "linewidth": 1.0},
}


def matplotlib_missing() -> str | None:
    """None when matplotlib imports; otherwise the one line that says how to install it."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError:
        return f"matplotlib is not installed, so no figures were drawn; {INSTALL_HINT}"
    return None


def figure_size_in(bars: int) -> tuple[float, float]:
    """Figure size in inches for ``bars`` bars (a whole number of pixels at :data:`DPI`)."""
    width = max(MIN_WIDTH_IN, LEFT_IN + RIGHT_IN + INCH_PER_BAR * bars)
    return round(width, 1), HEIGHT_IN


def _top(case: ReportCase) -> int:
    return max(max(v.stacked_bytes, v.budget_bytes) for v in case.variants)


def _tick_label(variant: Variant, baseline: Variant) -> str:
    """The variant's title, its token count and its gain over the case's first bar (a few
    percent of tokens hardly changes a bar's height, so the figure says it in numbers)."""
    text = "\n".join(textwrap.wrap(variant.title, 16))
    if variant.source in ("measured", "modelled"):
        text += f"\n({variant.source})"
    tokens = int(variant.breakdown.get("tokens", 0))
    text += f"\n{tokens:,} tokens"
    base = int(baseline.breakdown.get("tokens", 0))
    if variant is not baseline and base > 0:
        text += f"\n{(tokens - base) / base:+.1%} vs {baseline.title}"
    return text


def token_gains(case: ReportCase) -> list[str]:
    """This package's tokens against each other column's: ``+7.7 % tokens (80,640 -> 86,816)
    vs stock <release>``; none for a case without this package's column (a live server)."""
    ours = [v for v in case.variants if v.key == SPECINIT_KEY]
    if not ours:
        return []
    tokens = int(ours[0].breakdown.get("tokens", 0))
    lines = []
    for other in case.variants:
        if other is ours[0]:
            continue
        base = int(other.breakdown.get("tokens", 0))
        gain = f"{(tokens - base) / base * 100:+.1f} %" if base > 0 else "n/a"
        lines.append(f"{ours[0].title}: {gain} tokens ({base:,} -> {tokens:,}) vs {other.title}")
    return lines


def axis_start(case: ReportCase, unit: int) -> int:
    """Where the y axis starts, in ``unit``: 0, or a whole number below the base every bar
    shares when that base is most of the tallest bar (the differences then sit above it)."""
    top = _top(case)
    # The bytes under each bar's KV pools (weights and other resident bytes).
    below = (TARGET_WEIGHTS, DRAFT_WEIGHTS, OTHER_RESIDENT)
    base = min(sum(s.bytes for s in v.segments() if s.label in below) for v in case.variants)
    if top <= 0 or base <= CUT_ABOVE_SHARE * top:
        return 0
    return max(0, int((base - BASE_STUB_SHARE * (top - base)) // unit))


def draw_case(case: ReportCase) -> Any:
    """The case's figure (a ``matplotlib.figure.Figure``)."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    w, h = figure_size_in(len(case.variants))
    fig = Figure(figsize=(w, h), dpi=DPI)
    box = (LEFT_IN / w, BOTTOM_IN / h, (w - LEFT_IN - RIGHT_IN) / w, (h - BOTTOM_IN - TOP_IN) / h)
    ax = fig.add_axes(box)
    unit, unit_name = (1 << 30, "GiB") if _top(case) >= 2 << 30 else (1 << 20, "MiB")
    seen: dict[str, Any] = {}
    top = 0.0

    def bar(x: int, bottom: float, nbytes: int, label: str, key: str) -> None:
        style = _BAR_STYLES.get(label, _SEGMENT_STYLE)
        (patch,) = ax.bar(
            x, nbytes / unit, bottom=bottom, width=BAR_WIDTH, color=COLOURS[label], **style
        ).patches
        patch.set_gid(f"{'over' if label == OVER else label}:{key}")
        hatched = {k: style[k] for k in ("edgecolor", "hatch")} if "hatch" in style else {}
        face = "white" if label == UNUSED else COLOURS[label]
        seen.setdefault(label, Patch(facecolor=face, **hatched))

    for x, variant in enumerate(case.variants):
        base = 0
        for segment in variant.segments():
            bar(x, base / unit, segment.bytes, segment.label, variant.key)
            base += segment.bytes
        if variant.unused_bytes:
            bar(x, base / unit, variant.unused_bytes, UNUSED, variant.key)
        budget = variant.budget_bytes / unit
        ax.hlines(budget, x - 0.45, x + 0.45, colors="black", linestyles="--", linewidth=1.4)
        if variant.over_bytes:
            bar(x, budget, variant.over_bytes, OVER, variant.key)
            ax.annotate(
                f"OVER by\n{human_bytes(variant.over_bytes)}",
                (x, variant.stacked_bytes / unit),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                va="bottom",
                color=COLOURS[OVER],
                fontweight="bold",
                fontsize=8,
                gid=f"over-label:{variant.key}",
            )
        top = max(top, variant.stacked_bytes / unit, budget)
    from matplotlib.lines import Line2D

    order = [label for label in COLOURS if label in seen]  # legend in stacking order
    handles = [*(seen[label] for label in order), Line2D([], [], color="black", linestyle="--")]
    labels = [*order, "budget (f x free)"]
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
    labels_x = [_tick_label(v, case.variants[0]) for v in case.variants]
    ax.set_xticks(range(len(case.variants)), labels_x, fontsize=8)
    ax.set_xlim(-0.6, len(case.variants) - 0.4)
    start = axis_start(case, unit)
    ax.set_ylim(start, start + (top - start) * 1.15 if top > start else start + 1)
    ax.set_ylabel(f"{unit_name} per TP rank")
    if start:  # below the axis, clear of the bars: their heights are not proportional
        text = f"y axis cut: it starts at {start} {unit_name}, not 0"
        fig.text(0.01, 0.02, text, fontsize=8, fontstyle="italic", va="bottom", gid="axis-cut")
    lines = [case.subtitle] if case.subtitle else []
    lines += token_gains(case)
    title = "\n".join([textwrap.shorten(case.name, 90)] + [textwrap.shorten(x, 110) for x in lines])
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", color="#e0e0e0", linewidth=0.6)
    ax.set_axisbelow(True)
    return fig


def save_case_figures(case: ReportCase, out_dir: Path) -> list[Path]:
    """Write ``<slug>.png`` and ``<slug>.svg`` under ``out_dir``; returns both paths."""
    import matplotlib

    fig = draw_case(case)
    png, svg = out_dir / f"{case.slug}.png", out_dir / f"{case.slug}.svg"
    # Text stays text in the SVG; fixed hash salt and no date keep the files byte-identical.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "sglang-specinit"}):
        fig.savefig(png, dpi=DPI, metadata={"Software": None})
        fig.savefig(svg, metadata={"Date": None})
    return [png, svg]
