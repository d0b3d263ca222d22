"""``plan --json`` on every shipped example, in the environment the test runs in: its keys and
types are the ones docs/planner.md's "`plan --json`" tables list (read from the doc, so doc and
test cannot drift), and its notes are the text output's, each labelled with its column.

The report's figures on the same plans: each title names the model, GPU and release and says both
columns' tokens and the gain; the y axis is cut only above a base every bar shares, and the figure
says so."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from sglang_specinit.planner import report_figures
from sglang_specinit.planner.cli import _plan, _plannable, _planner_parser, main
from sglang_specinit.planner.columns import plan_json, plan_text
from sglang_specinit.planner.releases import installed_replay
from sglang_specinit.planner.report_cases import DRAFT_WEIGHTS, TARGET_WEIGHTS, case_from_plan_json
from sglang_specinit.planner.shipped_examples import example_refusal, list_examples

DOC = Path(__file__).resolve().parents[2] / "docs" / "planner.md"
TABLES = (
    "Breakdown keys (the top level, and the same keys in `stock`)",
    "Top-level keys besides the breakdown",
    "`stock` keys besides the breakdown",
)
TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "number": (int, float),
    "str": (str,),
    "object": (dict,),
    "list": (list,),
}
NOTE_COLUMNS = ("stock", "sglang-specinit", "both")
GIB = 1 << 30


def doc_table(heading: str) -> dict[str, tuple[str, bool]]:
    """``### heading``'s table in docs/planner.md: key -> (type, always present)."""
    text = DOC.read_text()
    start = text.index(f"### {heading}\n")
    rows: dict[str, tuple[str, bool]] = {}
    for line in text[start:].splitlines()[1:]:
        if line.startswith("#"):
            break
        match = re.match(r"^\| `([a-z_]+)` \| ([^|]+) \| [^|]+ \| ([^|]+) \|", line)
        if match:
            key, kind, present = (g.strip() for g in match.groups())
            rows[key] = (kind, present == "always")
    assert rows, f"no key rows under '### {heading}' in {DOC}"
    return rows


@cache
def planned(example: str) -> tuple[dict[str, Any], str]:
    """The example's ``plan --json`` and its text output, rendered from one plan (the CLI
    prints ``plan_json`` or ``plan_text`` of it). One plan per example: a second in-process
    plan of the same example may add a note the first has not (the 0.5.13 replay's state)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    options, launch = _planner_parser().parse_known_args(["--example", example])
    plan = _plan(options, launch)
    return json.loads(json.dumps(plan_json(plan))), plan_text(plan)


def plannable(example: str) -> None:
    """Skip an example the installed release refuses (a DeepSeek-V4 example before 0.5.20)
    after checking ``plan`` refuses it in one line."""
    refusal = example_refusal(example, installed_replay())
    if refusal is not None:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["plan", "--example", example, "--json"])
        out, err = out.getvalue(), err.getvalue()
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        pytest.skip(f"{example} is refused here: {refusal}")


def check_section(section: dict[str, Any], tables: tuple[str, ...]) -> None:
    documented: dict[str, tuple[str, bool]] = {}
    for heading in tables:
        documented.update(doc_table(heading))
    always = {k for k, (_, required) in documented.items() if required}
    assert always <= set(section), sorted(always - set(section))
    assert set(section) <= set(documented), sorted(set(section) - set(documented))
    for key, value in section.items():
        kind = documented[key][0]
        nullable = kind.endswith(" or null")
        allowed = TYPES[kind.removesuffix(" or null")]
        if value is None:
            assert nullable, key
        else:
            assert isinstance(value, allowed) and not isinstance(value, bool), (key, value)


@pytest.mark.parametrize("example", list_examples())
def test_plan_json_has_the_documented_keys_and_types_and_the_text_s_notes(example: str) -> None:
    plannable(example)
    data, text = planned(example)
    check_section(data, TABLES[:2])
    check_section(data["stock"], (TABLES[0], TABLES[2]))
    assert not [k for k in data if k.startswith(("stock_", "upstream_"))]
    assert data["stock"]["release"] == data["sglang_version"] == installed_replay().release
    assert data["stock"]["rule"] == "the release's own sizing code"
    assert data["rule"] == "specinit"
    assert set(data["device"]) == {"name", "total_bytes"}
    assert set(data["target_buffers"]) == {"bytes", "items"}
    for note in data["notes"]:
        assert set(note) == {"column", "text"} and note["column"] in NOTE_COLUMNS, note
        assert isinstance(note["text"], str) and note["text"], note
    # This package's rule fits; stock 0.5.13.post1 puts the draft on top of the budget.
    assert data["used_bytes"] <= data["budget_bytes"]
    assert data["stock"]["used_bytes"] > data["stock"]["budget_bytes"]
    # What the doc says the byte keys mean, in both columns.
    for column in (data, data["stock"]):
        assert isinstance(column["min_viable_mem_fraction_static"], float)
        assert column["tokens"] > 0 and column["tokens"] % column["page_size"] == 0
        assert column["used_bytes"] == (
            column["resident_bytes"]
            + column["target_kv_pool_bytes"]
            + column["draft_kv_pool_bytes"]
            + column["draft_request_bytes"]
            + column["draft_fixed_pool_bytes"]
        )
        assert column["headroom_bytes"] == column["budget_bytes"] - column["used_bytes"]
    # Every note is in the text and the JSON, with its column.
    labels = {
        "stock": f"stock {data['stock']['release']}",
        "sglang-specinit": "sglang-specinit",
        "both": "both columns",
    }
    text_notes = [line for line in text.splitlines() if line.startswith("* ")]
    json_notes = [f"* {labels[n['column']]}: {n['text']}" for n in data["notes"]]
    assert text_notes == json_notes
    # The table's header names the stock column as the notes do.
    header = next(line for line in text.splitlines() if line.rstrip().endswith("sglang-specinit"))
    assert header.split()[:2] == labels["stock"].split()


def test_the_doc_tables_are_read() -> None:
    """A doc edit that breaks the table format fails here, not as a vacuous pass."""
    breakdown = doc_table(TABLES[0])
    assert {"tokens", "budget_bytes", "rule"} <= set(breakdown)
    assert doc_table(TABLES[1])["notes"] == ("list", True)
    assert doc_table(TABLES[2])["spec_reserve_bytes"] == ("int", False)


def _axis_cut_notes(fig: Any) -> list[str]:
    return [t.get_text() for t in fig.texts if t.get_gid() == "axis-cut"]


@pytest.mark.parametrize("example", list_examples())
def test_the_figure_s_title_and_axis(example: str) -> None:
    """The title names model, GPU, release and both columns' tokens and the gain; the axis is
    cut only above the shared base, and says so."""
    pytest.importorskip("matplotlib")
    plannable(example)
    data = planned(example)[0]
    fig = report_figures.draw_case(case_from_plan_json(data, name=example))
    (ax,) = fig.axes
    title = ax.get_title()
    stock, ours = data["stock"]["tokens"], data["tokens"]
    gain = (ours - stock) / stock * 100
    assert f"{gain:+.1f} % tokens ({stock:,} -> {ours:,})" in title, title
    assert f"vs stock {data['stock']['release']}" in title, title
    for needle in (f"model {example}", data["device"]["name"], f"sglang {data['sglang_version']}"):
        assert needle in title, (needle, title)

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
    pytest.importorskip("matplotlib")
    data = planned(_plannable()[0][0])[0]
    light = {**data["stock"], "resident_bytes": data["resident_bytes"] // 10}
    light["target_weight_bytes"] = light["resident_bytes"] - light["draft_weight_bytes"]
    fig = report_figures.draw_case(case_from_plan_json({**data, "stock": light}))
    assert fig.axes[0].get_ylim()[0] == 0 and _axis_cut_notes(fig) == []
