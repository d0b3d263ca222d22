"""``plan --json`` on every shipped example, in the environment the test runs in: its keys and
types are the ones docs/planner.md's "`plan --json`" tables list (read from the doc, so doc and
test cannot drift), and its notes are the text output's, each labelled with its column."""

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
from sglang_specinit.planner.cli import _plan, _planner_parser, main
from sglang_specinit.planner.columns import plan_json, plan_text
from sglang_specinit.planner.releases import installed_replay
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


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


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
        code, out, err = _run("plan", "--example", example, "--json")
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
def test_plan_json_has_the_documented_keys_and_types(example: str) -> None:
    plannable(example)
    data, _ = planned(example)
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
    # What the doc says the byte keys mean, in both columns.
    for column in (data, data["stock"]):
        assert column["used_bytes"] == (
            column["resident_bytes"]
            + column["target_kv_pool_bytes"]
            + column["draft_kv_pool_bytes"]
            + column["draft_request_bytes"]
            + column["draft_fixed_pool_bytes"]
        )
        assert column["headroom_bytes"] == column["budget_bytes"] - column["used_bytes"]


@pytest.mark.parametrize("example", list_examples())
def test_every_note_is_in_the_text_and_the_json_with_its_column(example: str) -> None:
    plannable(example)
    data, text = planned(example)
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
