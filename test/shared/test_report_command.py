"""``plan --json`` against docs/planner.md, its text and its figure; ``report``'s directory
against the JSON; per-rank memory reports (names, tightness lines, the tightest rank). On each
generation, with the installed release's stock column."""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from functools import cache
from itertools import product, takewhile
from pathlib import Path
from typing import Any

import pytest
from harness.planner_cli import run_cli
from harness.releases import installed_row
from harness.reports.report_reading import read_rank_breakdowns
from PIL import Image
from sglang_specinit import rank_reports
from sglang_specinit.planner import report_figures
from sglang_specinit.planner.releases import installed_replay
from sglang_specinit.planner.report_cases import (
    DRAFT_KV,
    DRAFT_WEIGHTS,
    TARGET_KV,
    TARGET_WEIGHTS,
    case_from_plan_json,
    cases_from_paths,
)
from sglang_specinit.planner.shipped_examples import example_refusal, list_examples
from sglang_specinit.report import human_bytes

os.environ["HF_HUB_OFFLINE"] = "1"
EXAMPLE = "llama31-8b-eagle3"
EXAMPLES = ["deepseek-v3-mtp", "deepseek-v4-flash-mtp", "gpt-oss-20b-eagle3"]
EXAMPLES += ["llama31-70b-eagle-tp4", "llama31-8b-eagle3", "qwen3-moe-eagle3"]
# adapter -> (the examples its release does not plan, whether stock puts the draft over budget):
# the DeepSeek-V4 example is planned by the 0.5.21+ replays only.
SKIPPED, STOCK_OVER = {
    "sglang_0_5_13": (["deepseek-v4-flash-mtp"], True),
    "sglang_0_5_23": ([], False),
}[installed_row().adapter]


@cache
def _plan(example: str) -> tuple[dict[str, Any], str]:
    from sglang_specinit.planner.cli import _plan, _planner_parser
    from sglang_specinit.planner.columns import plan_json, plan_text

    options, launch = _planner_parser().parse_known_args(["--example", example])
    built = _plan(options, launch)
    return json.loads(json.dumps(plan_json(built))), plan_text(built)


def planned(example: str) -> tuple[dict[str, Any], str]:
    """``example``'s ``plan --json`` and text, from one plan (a second in-process plan may add a
    note); skipped where the installed release refuses the example."""
    if (refusal := example_refusal(example, installed_replay())) is not None:
        pytest.skip(f"{example} is refused here: {refusal}")
    return _plan(example)


SEGMENT_KEYS = {
    TARGET_WEIGHTS: "target_weight_bytes",
    DRAFT_WEIGHTS: "draft_weight_bytes",
    TARGET_KV: "target_kv_pool_bytes",
    DRAFT_KV: "draft_kv_pool_bytes",
}

DOC = Path(__file__).resolve().parents[2] / "docs" / "planner.md"
TABLES = (
    "Breakdown keys (the top level, and the same keys in `stock`)",
    "Top-level keys besides the breakdown",
    "`stock` keys besides the breakdown",
)
TYPES = {"int": (int,), "number": (int, float), "str": (str,), "object": (dict,), "list": (list,)}
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


def check_section(section: dict[str, Any], tables: tuple[str, ...]) -> None:
    documented = {key: row for heading in tables for key, row in doc_table(heading).items()}
    always = {k for k, (_, required) in documented.items() if required}
    assert always <= set(section), sorted(always - set(section))
    assert set(section) <= set(documented), sorted(set(section) - set(documented))
    for key, value in section.items():
        kind = documented[key][0]
        if value is None:
            assert kind.endswith(" or null"), key
        else:
            allowed = TYPES[kind.removesuffix(" or null")]
            assert isinstance(value, allowed) and not isinstance(value, bool), (key, value)


def _axis_cut_notes(fig: Any) -> list[str]:
    return [t.get_text() for t in fig.texts if t.get_gid() == "axis-cut"]


@pytest.mark.parametrize("example", list_examples())
def test_plan_json_has_the_documented_keys_and_types_the_text_s_notes_and_its_figure(
    example: str,
) -> None:
    # The doc's tables are read: a doc edit that breaks their format fails, not a vacuous pass.
    assert {"tokens", "budget_bytes", "rule"} <= set(doc_table(TABLES[0]))
    assert doc_table(TABLES[1])["notes"] == ("list", True)
    assert doc_table(TABLES[2])["spec_reserve_bytes"] == ("int", False)
    data, text = planned(example)
    check_section(data, TABLES[:2])
    check_section(data["stock"], (TABLES[0], TABLES[2]))
    assert not [k for k in data if k.startswith(("stock_", "upstream_"))]
    assert data["stock"]["release"] == data["sglang_version"] == installed_replay().release
    assert data["stock"]["rule"] == "the release's own sizing code"
    assert data["rule"] == "specinit"
    assert set(data["device"]) == {"name", "total_bytes"}
    assert set(data["target_buffers"]) == {"bytes", "items"}
    stock_label = f"stock {data['stock']['release']}"
    labels = {"stock": stock_label, "sglang-specinit": "sglang-specinit", "both": "both columns"}
    for note in data["notes"]:
        assert set(note) == {"column", "text"} and note["column"] in labels, note
        assert isinstance(note["text"], str) and note["text"], note
    # This package's rule fits; stock 0.5.13.x puts the draft on top of the budget.
    assert data["used_bytes"] <= data["budget_bytes"]
    assert (data["stock"]["used_bytes"] > data["stock"]["budget_bytes"]) == STOCK_OVER
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
    text_notes = [line for line in text.splitlines() if line.startswith("* ")]
    json_notes = [f"* {labels[n['column']]}: {n['text']}" for n in data["notes"]]
    assert text_notes == json_notes
    # The table's header names the stock column as the notes do.
    header = next(line for line in text.splitlines() if line.rstrip().endswith("sglang-specinit"))
    assert header.split()[:2] == labels["stock"].split()

    # The figure: the title names model, GPU, release, draft and TP and both columns' tokens and
    # the gain; each bar's slices, over-budget part and tick are the JSON's; the axis is cut only
    # above the shared base, and says so.
    case = case_from_plan_json(data, name=example)
    fig = report_figures.draw_case(case)
    (ax,) = fig.axes
    title = ax.get_title()
    stock, ours = data["stock"]["tokens"], data["tokens"]
    gain = (ours - stock) / stock * 100
    assert f"{gain:+.1f} % tokens ({stock:,} -> {ours:,})" in title, title
    for needle in (
        f"vs stock {data['stock']['release']}",
        f"model {example}",
        data["device"]["name"],
        f"sglang {data['sglang_version']}",
        f"{data['speculative_algorithm']} draft",
        f"TP {data['tp_size']}",
    ):
        assert needle in title, (needle, title)
    # The plan names the release whose code it ran.
    assert "sglang 9.9.9" in case_from_plan_json({**data, "sglang_version": "9.9.9"}).subtitle

    # Budgets of tens of GiB are drawn in GiB.
    columns = {"stock": data["stock"], "specinit": data}
    for label, key in SEGMENT_KEYS.items():
        heights = {k: p.get_height() * GIB for k, p in bar_patches(fig, label).items()}
        assert heights == pytest.approx({k: c[key] for k, c in columns.items()}, rel=1e-9, abs=1)
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    first = case.variants[0]
    for variant, tick in zip(case.variants, ticks, strict=True):
        tokens = columns[variant.key]["tokens"]
        assert f"{tokens:,} tokens" in tick, tick
        if variant is not first:
            assert f"{(tokens - stock) / stock:+.1%} vs {first.title}" in tick, tick
    # Where stock is over budget (above), its part over is drawn; this package's plan is not.
    over = data["stock"]["used_bytes"] - data["stock"]["budget_bytes"]
    over_patches = bar_patches(fig, "over")
    assert set(over_patches) == {k for k, c in columns.items() if c["headroom_bytes"] < 0}
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert ("over budget" in legend) == STOCK_OVER and "budget (f x free)" in legend
    if STOCK_OVER:
        patch = over_patches["stock"]
        assert patch.get_y() * GIB == pytest.approx(data["stock"]["budget_bytes"], rel=1e-9)
        assert patch.get_height() * GIB == pytest.approx(over, rel=1e-9)
        assert patch.get_facecolor()[:3] == pytest.approx((1.0, 0x1A / 255, 0x1A / 255))
        over_labels = [t.get_text() for t in ax.texts if t.get_gid() == "over-label:stock"]
        assert over_labels == [f"OVER by\n{human_bytes(over)}"]

    bottom, top = ax.get_ylim()
    # The weights under every bar's KV pools; the axis never cuts into a pool.
    base = min(c["resident_bytes"] for c in columns.values()) / GIB
    tallest = max(max(c["used_bytes"], c["budget_bytes"]) for c in columns.values()) / GIB
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


@pytest.fixture
def plan_data() -> dict:
    """``plan --example llama31-8b-eagle3 --json``, a copy to edit."""
    return copy.deepcopy(planned(EXAMPLE)[0])


def report(tmp: Path, *argv: str, data: dict | None = None) -> tuple[Path, str, str]:
    """``report --out tmp/report *argv`` (``--from-json`` on ``data`` if given), which must exit 0:
    its directory, stdout, stderr."""
    if data is not None:
        (tmp / "plan.json").write_text(json.dumps(data))
        argv = ("--from-json", str(tmp / "plan.json"))
    code, out, err = run_cli(["report", "--out", str(tmp / "report"), *argv])
    assert code == 0, err
    return tmp / "report", out, err


def table_rows(page: str, first_column: str) -> dict[str, dict[str, str]]:
    """The Markdown table whose header starts with ``first_column``: row label -> cells."""
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_column} |"))
    table = takewhile(lambda line: line.startswith("|"), lines[start:])
    header, _, *rows = ([c.strip() for c in line.strip("|").split("|")] for line in table)
    return {cells[0]: dict(zip(header, cells, strict=True)) for cells in rows}


def bar_patches(fig, gid_prefix: str) -> dict[str, object]:
    """The figure's rectangles whose gid starts with ``gid_prefix``, by variant key."""
    (ax,) = fig.axes
    return {
        p.get_gid().split(":", 1)[1]: p
        for p in ax.patches
        if (p.get_gid() or "").startswith(gid_prefix + ":")
    }


# The report's figure size in inches by number of bars: 4.8 high; 8.0 wide, or 3.0 of margins
# plus 1.3 per bar once that is wider. PNGs are 100 dpi; an SVG measures in points (72 per inch).
FIGURE_IN = {2: (8.0, 4.8), 3: (8.0, 4.8), 4: (8.2, 4.8), 16: (23.8, 4.8)}
PNG_DPI = 100
INCH_M = 0.0254


def png(path: Path, bars: int) -> Image.Image:
    """The PNG at ``path``, opened (its chunks before the image data read): the pixel size the
    report must draw for ``bars`` bars."""
    image = Image.open(path)
    width_in, height_in = FIGURE_IN[bars]
    assert image.format == "PNG"
    assert image.size == (round(width_in * PNG_DPI), round(height_in * PNG_DPI)), path
    return image


def test_the_report_directory_shows_the_plan_json(plan_data: dict, tmp_path: Path) -> None:
    """Its numbers, table cells, over-budget stock column, images; figure widths, an uncut axis."""
    out, _, _ = report(tmp_path, data=plan_data)
    data = json.loads((out / "report.json").read_text())
    (case,) = data.values()
    assert [v["key"] for v in case["variants"]] == ["stock", "specinit"]
    page = (out / "README.md").read_text()
    rows = table_rows(page, "variant")
    for variant in case["variants"]:
        expected = plan_data if variant["key"] == "specinit" else plan_data[variant["key"]]
        for key in ("tokens", "max_running_requests", "budget_bytes"):
            assert variant[key] == expected[key], key
        for label, key in SEGMENT_KEYS.items():
            assert variant["segments"][label] == expected[key], label
        # The bar's slices add up to what the plan says it uses.
        assert sum(variant["segments"].values()) == expected["used_bytes"]
        assert variant["over_bytes"] == max(0, -expected["headroom_bytes"])
        assert variant["unused_bytes"] == max(0, expected["headroom_bytes"])

        row = rows[variant["title"]]
        assert int(row["tokens"]) == expected["tokens"]
        assert int(row["max running requests"]) == expected["max_running_requests"]
        assert row["target KV"] == human_bytes(expected["target_kv_pool_bytes"])
        assert row["draft KV"] == human_bytes(expected["draft_kv_pool_bytes"])
        assert row["budget"] == human_bytes(expected["budget_bytes"])
    stock = plan_data["stock"]
    headroom = stock["budget_bytes"] - stock["used_bytes"]
    cell = f"**OVER by {human_bytes(-headroom)}**" if STOCK_OVER else human_bytes(headroom)
    assert rows[f"stock {stock['release']}"]["headroom"] == cell

    slug = case_from_plan_json(plan_data).slug
    image = png(out / f"{slug}.png", 2)  # 800 x 480
    # The PNG says it is 100 dpi (in pixels per metre, rounded; before the image data).
    assert image.info["dpi"] == (round(PNG_DPI / INCH_M) * INCH_M,) * 2
    root = ET.parse(out / f"{slug}.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    points = [f"{inches * 72:g}" for inches in FIGURE_IN[2]]  # 576 x 345.6
    assert [root.get("width"), root.get("height")] == [f"{p}pt" for p in points]
    assert root.get("viewBox").split() == ["0", "0", *points]
    assert f"]({slug}.png)" in page and f"]({slug}.svg)" in page
    ids = {el.get("id") for el in root.iter()}
    assert ("over:stock" in ids) == STOCK_OVER and "over:specinit" not in ids
    texts = "".join("".join(el.itertext()) for el in root.iter("{http://www.w3.org/2000/svg}text"))
    assert ("OVER by" in texts) == STOCK_OVER
    # The width grows with the number of bars.
    for bars in FIGURE_IN:
        assert report_figures.figure_size_in(bars) == FIGURE_IN[bars], bars
    # A column with a tenth of the other's weights: no shared base, so the axis starts at zero.
    light = {**plan_data["stock"], "resident_bytes": plan_data["resident_bytes"] // 10}
    light["target_weight_bytes"] = light["resident_bytes"] - light["draft_weight_bytes"]
    fig = report_figures.draw_case(case_from_plan_json({**plan_data, "stock": light}))
    assert fig.axes[0].get_ylim()[0] == 0 and _axis_cut_notes(fig) == []


def test_live_directory_shows_planned_against_allocated_per_rank(
    plan_data: dict, tmp_path: Path
) -> None:
    server = tmp_path / "live" / "server-a"
    server.mkdir(parents=True)
    # memory-rank<N>.json files in the server's key layout (the plan's keys + live ones).
    plan_keys = {k: v for k, v in plan_data.items() if not isinstance(v, dict)}
    ranks = [
        {
            **plan_keys,
            "tp_rank": rank,
            "allocated_target_kv_pool_bytes": plan_data["target_kv_pool_bytes"] + delta,
            "allocated_draft_kv_pool_bytes": plan_data["draft_kv_pool_bytes"],
            "phase_seconds": {"1/4 load target weights": 1.0},
        }
        for rank, delta in ((0, 0), (1, -4096))
    ]
    for r in ranks:
        (server / f"memory-rank{r['tp_rank']}.json").write_text(json.dumps(r))
    out, _, _ = report(tmp_path, "--from-json", str(tmp_path / "live"))

    (case,) = cases_from_paths([tmp_path / "live"])
    assert case.kind == "live" and case.name == "server-a"
    rows = table_rows((out / "README.md").read_text(), "rank")
    for r in ranks:
        row = rows[str(r["tp_rank"])]
        assert int(row["tokens"]) == r["tokens"]
        assert row["target KV planned"] == human_bytes(r["target_kv_pool_bytes"])
        assert row["target KV allocated"] == human_bytes(r["allocated_target_kv_pool_bytes"])
        delta = r["allocated_target_kv_pool_bytes"] - r["target_kv_pool_bytes"]
        assert row["allocated - planned"] == f"{delta:+d} B"
    fig = report_figures.draw_case(case)
    allocated = bar_patches(fig, TARGET_KV)
    assert allocated["rank1-allocated"].get_height() * (1 << 30) == pytest.approx(
        ranks[1]["allocated_target_kv_pool_bytes"], rel=1e-9
    )
    png(next(out.glob("*.png")), 4)


def test_missing_matplotlib_gives_one_clear_line_and_still_writes_markdown(
    plan_data: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Python without matplotlib: ``import matplotlib`` raises ImportError until the test ends.
    for name in [n for n in sys.modules if n == "matplotlib" or n.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out, stdout, err = report(tmp_path, data=plan_data)
    assert err.count("\n") == 1 and "Traceback" not in err + stdout
    assert "matplotlib is not installed" in err and "sglang-specinit[report]" in err
    page = (out / "README.md").read_text()
    assert "matplotlib is not installed" in page and ".png)" not in page
    assert table_rows(page, "variant")["sglang-specinit"]["tokens"] == str(plan_data["tokens"])
    assert not list(out.glob("*.png")) and not list(out.glob("*.svg"))


def test_without_inputs_every_shipped_example_is_rendered(tmp_path: Path) -> None:
    out, stdout, err = report(tmp_path)
    data = json.loads((out / "report.json").read_text())
    assert list_examples() == EXAMPLES
    assert sorted(data) == [e for e in EXAMPLES if e not in SKIPPED]
    for example in SKIPPED:  # saying why
        assert f"example {example} skipped: DeepSeek-V4" in err
    for slug, case in data.items():
        assert [v["key"] for v in case["variants"]] == ["stock", "specinit"]
        png(out / f"{slug}.png", 3)
        ET.parse(out / f"{slug}.svg")
    assert f"{len(data)} cases" in stdout
    # The index: the page's one table above the first case's section (header, rule, rows), a
    # skipped example's row with the same reason.
    head = (out / "README.md").read_text().split('<a id="', 1)[0]
    index = [line for line in head.splitlines() if line.startswith("| ")][2:]
    assert len(index) == len(list_examples())
    for example in list_examples():
        (row,) = [r for r in index if r.startswith((f"| [{example}]", f"| {example} |"))]
        if (refusal := example_refusal(example, installed_replay())) is not None:
            assert row == f"| {example} | skipped | {refusal} |"
        else:
            assert f"](#{example}) | plan |" in row


def test_another_release_s_stock_column_appears_beside_this_one(
    plan_data: dict, tmp_path: Path
) -> None:
    """From a stock sub-object in the JSON (no code changes), or ``--beside`` a venv."""
    data = {**plan_data, "beside": {**plan_data["stock"], "release": "9.9.9", "tokens": 12345}}
    (tmp_path / "json").mkdir()
    out, _, _ = report(tmp_path / "json", data=data)
    (case,) = json.loads((out / "report.json").read_text()).values()
    titles = [v["title"] for v in case["variants"]]
    assert titles == [f"stock {plan_data['stock']['release']}", "stock 9.9.9", "sglang-specinit"]
    rows = table_rows((out / "README.md").read_text(), "variant")
    assert rows["stock 9.9.9"]["tokens"] == "12345"
    png(next(out.glob("*.png")), 3)

    # A directory whose bin/python runs this interpreter (as its own venv).
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (venv / "bin" / "python").chmod(0o755)
    out, _, _ = report(tmp_path, "--example", EXAMPLE, "--beside", str(venv))
    (case,) = json.loads((out / "report.json").read_text()).values()
    assert [v["key"] for v in case["variants"]] == ["stock", "beside", "specinit"]
    (beside,) = [v for v in case["variants"] if v["key"] == "beside"]
    release = plan_data["stock"]["release"]
    assert beside["title"] == f"stock {release}"
    assert beside["tokens"] == plan_data["stock"]["tokens"]
    page = (out / "README.md").read_text()
    assert f"stock {release}: computed in {venv} by that release's own code" in page


# Per-rank memory reports (``sglang_specinit.rank_reports``)


def breakdown(rank: int, free: int | None, *, tokens: int = 1000, **ranks: int) -> dict:
    fields = {"rank_index": rank, "tp_rank": rank, "pp_rank": 0, "dp_rank": 0, "tp_size": 2}
    fields.update(ranks, tokens=tokens, rank_free_at_sizing_bytes=free, tightest_rank=None)
    if free is not None:
        above = free - (100 << 20)
        fields.update(min_free_at_sizing_bytes=100 << 20, free_above_tightest_bytes=above)
        fields["tightest_rank"] = above <= rank_reports.TIGHTEST_TOLERANCE_BYTES
    return fields


def test_every_scheduler_of_dp_pp_tp_gets_its_own_file_name() -> None:
    names = set()
    for replica, pp, tp in product(range(2), range(2), range(4)):
        index = rank_reports.scheduler_rank_index(replica, pp, tp, 2, 4)
        b = {"rank_index": index, "pp_rank": pp, "tp_rank": tp, "dp_rank": replica}
        names.add(rank_reports.breakdown_file_name(b))
    assert len(names) == 16
    assert "memory-rank13-pp1-tp1-dp1.json" in names  # (1 * 2 + 1) * 4 + 1
    # A breakdown without rank fields (one rank) is rank 0.
    assert rank_reports.breakdown_file_name({}) == "memory-rank0-pp0-tp0-dp0.json"
    # A replica and an attention-DP rank apart.
    ranks = {"pp_rank": 0, "tp_rank": 1, "dp_rank": 1, "pp_size": 1, "tp_size": 2, "dp_size": 2}
    replica = rank_reports.rank_fields(replica=1, attn_tp_rank=1, **ranks)
    attention_dp = rank_reports.rank_fields(replica=0, attn_tp_rank=0, **ranks)
    assert rank_reports.breakdown_file_name(replica) == "memory-rank3-pp0-tp1-dp1.json"
    assert rank_reports.breakdown_file_name(attention_dp) == "memory-rank1-pp0-tp1-dp1.json"
    assert attention_dp["attn_tp_rank"] == 0 and attention_dp["dp_size"] == 2


def test_each_rank_s_fields_line_and_file_say_whether_it_is_the_tightest(tmp_path: Path) -> None:
    tight = rank_reports.tightness(breakdown(1, 100 << 20))
    roomy = rank_reports.tightness(breakdown(0, 124 << 20))
    assert tight.startswith("rank 1 (pp0 tp1 dp0) is the tightest rank")
    assert roomy.startswith("rank 0 (pp0 tp0 dp0) is not the tightest rank: 24.00 MiB more free")
    assert "1000 tokens" in tight and "1000 tokens" in roomy
    single = breakdown(0, 100 << 20, tp_size=1)
    assert "(the only rank)" in rank_reports.tightness(single)
    assert "not known" in rank_reports.tightness(breakdown(0, None))
    # The fields, from a rank's own reading and the minimum.
    mib = 1 << 20
    roomy = rank_reports.tightness_fields(124 * mib, 100 * mib)
    assert roomy == {
        "rank_free_at_sizing_bytes": 124 * mib,
        "min_free_at_sizing_bytes": 100 * mib,
        "free_above_tightest_bytes": 24 * mib,
        "tightest_rank": False,
    }
    # Within the tolerance (float32 minimum, context buffers) a rank counts as the tightest.
    tolerance = rank_reports.TIGHTEST_TOLERANCE_BYTES
    near = rank_reports.tightness_fields(100 * mib + tolerance, 100 * mib)
    assert near["tightest_rank"] is True
    assert rank_reports.tightness_fields(None, 100 * mib)["tightest_rank"] is None
    assert rank_reports.tightness_fields(100 * mib, None)["rank_free_at_sizing_bytes"] is None
    # The tightest rank is derived from the files after the fact.
    written = [breakdown(0, 124 << 20), breakdown(1, 100 << 20), breakdown(2, 110 << 20)]
    paths = [rank_reports.write_breakdown(tmp_path, b) for b in written]
    assert paths[1].name == "memory-rank1-pp0-tp1-dp0.json"
    # write_breakdown leaves only the named files.
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in paths]
    (tmp_path / "unrelated.json").write_text("{}")
    found = read_rank_breakdowns(tmp_path)
    assert found == written
    assert rank_reports.tightest(found)["rank_index"] == 1
    with pytest.raises(ValueError, match="different token counts"):
        rank_reports.tightest([breakdown(0, 1 << 30), breakdown(1, 1 << 30, tokens=999)])
    with pytest.raises(ValueError, match="no rank"):
        rank_reports.tightest([])
