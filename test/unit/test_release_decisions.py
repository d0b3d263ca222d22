"""Which adapter each sglang release gets; an unserved one is declined naming the served ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib
from harness.releases import RELEASES, SERVED
from sglang_specinit import compat


@pytest.mark.parametrize(("version", "adapter"), [(r.name, r.adapter) for r in RELEASES])
def test_served_releases_get_their_adapter(version: str, adapter: str) -> None:
    decision = compat.decide_for_version(version)
    assert decision.adapter == adapter and decision.generation is compat.generations()[adapter]


STOCK = "SGLang starts stock, draft memory outside the budget"
OWN = "SGLang's own phased init runs unchanged"
OLDER = "older than 0.5.13"


@pytest.mark.parametrize(
    ("release", "why"),
    [("0.5.13.post2", STOCK), ("0.5.15.post2", OWN), ("0.5.16.post1", None), ("0.5.24", OWN)]
    + [(r, None) for r in ("0.5.24rc1", "0.5.30", "0.6.0", "1.0.0")]
    + [(r, OLDER) for r in ("0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1")],
)
def test_an_unserved_release_is_declined_naming_the_served_ones(release: str, why: str) -> None:
    """Older than the oldest served: unsupported; a later one: not served, told what runs."""
    decision = compat.decide_for_version(release)
    assert decision.adapter is decision.generation is None, decision
    assert decision.not_served == (why != OLDER), decision
    assert release in decision.reason and ", ".join(SERVED) in decision.reason
    if why == OLDER:
        assert OLDER in decision.reason and "docs/releases.md" in decision.reason
    elif why is not None:
        assert decision.reason.endswith(why)


def test_each_adapter_is_one_generation_and_0_5_23_serves_its_table_s_rows() -> None:
    from sglang_specinit.sglang_0_5_23 import release_shims

    assert tuple(compat.supported_releases()) == SERVED
    generations = compat.generations()
    assert list(generations) == ["sglang_0_5_13", "sglang_0_5_14", "sglang_0_5_23"]
    assert [g.sglang_phases_init for g in generations.values()] == [False, True, True]
    table = release_shims.RELEASE_TABLE
    assert generations["sglang_0_5_23"].releases == tuple(table)
    # A post-release between rows reads the row it follows; an older one the oldest's form.
    between = list(table)[-2]
    assert release_shims.row(f"{between}.post1") == table[between]
    assert release_shims.row("0.5.24rc1") == table["0.5.23"]
    assert release_shims.row("0.5.15") == table["0.5.16"]
    # Each row keeps what the rows before it added.
    rows = list(table.values())
    for older, newer in zip(rows, rows[1:], strict=False):
        kept = {k for k, v in vars(older).items() if v}
        assert kept <= {k for k, v in vars(newer).items() if v}


# The served releases written in pyproject.toml, the README and docs/releases.md are compat's.

ROOT = Path(__file__).resolve().parents[2]
RELEASE = r"0\.5\.\d+(?:\.post\d+)?"


def test_pyproject_docs_and_readme_name_the_served_releases() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    comment = re.search(r"# Served: (.*?)\(compat", text, re.S)
    assert comment, "pyproject.toml lost its '# Served: ...' comment"
    served = list(compat.supported_releases())
    assert re.findall(RELEASE, comment.group(1)) == served
    description = tomllib.loads(text)["project"]["description"]
    assert f"SGLang {served[0]} - {served[-1].split('.post')[0]}" in description
    # docs/releases.md: each adapter's row lists its releases.
    by_adapter: dict[str, list[str]] = {}
    for line in (ROOT / "docs" / "releases.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not re.fullmatch(r"`sglang_0_5_\d+/`", cells[1]):
            continue
        by_adapter.setdefault(cells[1].strip("`/"), []).extend(re.findall(RELEASE, cells[0]))
    expected = {a: sorted(g.releases) for a, g in compat.generations().items()}
    assert {a: sorted(r) for a, r in by_adapter.items()} == expected
    # The README: the oldest and the newest.
    readme = (ROOT / "README.md").read_text()
    assert f"from {served[0]} to {served[-1]}" in readme
    assert f"**{served[-1]}** (the newest)" in readme
