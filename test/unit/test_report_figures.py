"""The report's figures and index on every shipped example this environment plans: each title
names the model, GPU and release and says both columns' tokens and the gain; the y axis is cut
only above a base every bar shares, and the figure says so; the index lists every example,
the skipped ones with their reason. Read from the matplotlib objects and the page text."""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from sglang_specinit.planner import report_figures
from sglang_specinit.planner.cli import _plan, _plannable, _planner_parser
from sglang_specinit.planner.columns import plan_json
from sglang_specinit.planner.report_cases import (
    DRAFT_WEIGHTS,
    TARGET_WEIGHTS,
    case_from_plan_json,
)
from sglang_specinit.planner.report_pages import write_report
from sglang_specinit.planner.shipped_examples import list_examples

pytest.importorskip("matplotlib")

GIB = 1 << 30


@cache
def plannable() -> tuple[list[str], dict[str, str]]:
    return _plannable()


@cache
def planned(example: str) -> dict[str, Any]:
    os.environ["HF_HUB_OFFLINE"] = "1"
    options, launch = _planner_parser().parse_known_args(["--example", example])
    return json.loads(json.dumps(plan_json(_plan(options, launch))))


def _figure(example: str) -> tuple[dict[str, Any], Any]:
    if example not in plannable()[0]:
        pytest.skip(f"{example} is refused here: {plannable()[1][example]}")
    data = planned(example)
    return data, report_figures.draw_case(case_from_plan_json(data, name=example))


def _axis_cut_notes(fig: Any) -> list[str]:
    return [t.get_text() for t in fig.texts if t.get_gid() == "axis-cut"]


@pytest.mark.parametrize("example", list_examples())
def test_the_title_names_model_gpu_release_and_both_columns_tokens_and_gain(
    example: str,
) -> None:
    data, fig = _figure(example)
    (ax,) = fig.axes
    title = ax.get_title()
    stock, ours = data["stock"]["tokens"], data["tokens"]
    gain = (ours - stock) / stock * 100
    assert f"{gain:+.1f} % tokens ({stock:,} -> {ours:,})" in title, title
    assert f"vs stock {data['stock']['release']}" in title, title
    for needle in (f"model {example}", data["device"]["name"], f"sglang {data['sglang_version']}"):
        assert needle in title, (needle, title)


@pytest.mark.parametrize("example", list_examples())
def test_the_axis_is_cut_only_above_the_shared_base_and_says_so(example: str) -> None:
    data, fig = _figure(example)
    (ax,) = fig.axes
    bottom, top = ax.get_ylim()
    columns = (data, data["stock"])
    # The weights under every bar's KV pools; the axis never cuts into a pool.
    base = min(c["resident_bytes"] for c in columns) / GIB
    tallest = max(max(c["used_bytes"], c["budget_bytes"]) for c in columns) / GIB
    notes = _axis_cut_notes(fig)
    if bottom > 0:
        assert bottom < base and base > report_figures.CUT_ABOVE_SHARE * tallest
        assert notes == [f"y axis cut: it starts at {bottom:.0f} GiB, not 0"]
        # The KV pools take a larger share of the axis than they would from 0.
        assert (tallest - base) / (top - bottom) > (tallest - base) / top
    else:
        assert base <= report_figures.CUT_ABOVE_SHARE * tallest and notes == []
    # Every bar's weights still start on the axis or below it.
    weights = [
        p for p in ax.patches if (p.get_gid() or "").startswith((TARGET_WEIGHTS, DRAFT_WEIGHTS))
    ]
    assert weights and all(p.get_y() + p.get_height() > bottom for p in weights)


def test_the_axis_starts_at_zero_when_the_bars_differ_below_the_pools() -> None:
    """A column with a tenth of the other's weights: no shared base, no cut."""
    data = planned(plannable()[0][0])
    light = {**data["stock"], "resident_bytes": data["resident_bytes"] // 10}
    light["target_weight_bytes"] = light["resident_bytes"] - light["draft_weight_bytes"]
    fig = report_figures.draw_case(case_from_plan_json({**data, "stock": light}))
    assert fig.axes[0].get_ylim()[0] == 0 and _axis_cut_notes(fig) == []


def test_the_index_lists_every_example_and_why_one_was_skipped(tmp_path: Path) -> None:
    names, skipped = plannable()
    cases = [case_from_plan_json(planned(n), name=n) for n in names]
    page = write_report(cases, tmp_path, skipped_cases=skipped).page.read_text()
    # The index: the page's one table above the first case's section (header, rule, rows).
    head = page.split('<a id="', 1)[0]
    index = [line for line in head.splitlines() if line.startswith("| ")][2:]
    assert len(index) == len(list_examples())
    for example in list_examples():
        (row,) = [r for r in index if r.startswith((f"| [{example}]", f"| {example} |"))]
        if example in skipped:
            assert row == f"| {example} | skipped | {skipped[example]} |"
        else:
            assert f"](#{example}) | plan |" in row
