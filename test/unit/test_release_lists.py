"""The served releases written in pyproject.toml, the README and docs/releases.md are compat's."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
from sglang_specinit import compat

ROOT = Path(__file__).resolve().parents[2]
RELEASE = r"0\.5\.\d+(?:\.post\d+)?"


def test_pyproject_lists_every_served_release_and_their_range() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    comment = re.search(r"# Served: (.*?)\(compat", text, re.S)
    assert comment, "pyproject.toml lost its '# Served: ...' comment"
    served = list(compat.supported_releases())
    assert re.findall(RELEASE, comment.group(1)) == served
    description = tomllib.loads(text)["project"]["description"]
    assert f"SGLang {served[0]} - {served[-1].split('.post')[0]}" in description


def test_the_release_table_of_docs_releases_md_is_compat_s() -> None:
    by_adapter: dict[str, list[str]] = {}
    for line in (ROOT / "docs" / "releases.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not re.fullmatch(r"`sglang_0_5_\d+/`", cells[1]):
            continue
        by_adapter.setdefault(cells[1].strip("`/"), []).extend(re.findall(RELEASE, cells[0]))
    expected = {
        adapter: list(generation.releases) for adapter, generation in compat.generations().items()
    }
    assert {a: sorted(r) for a, r in by_adapter.items()} == {
        a: sorted(r) for a, r in expected.items()
    }


def test_the_readme_names_the_oldest_and_the_newest_served_release() -> None:
    readme = (ROOT / "README.md").read_text()
    served = compat.supported_releases()
    assert f"from {served[0]} to {served[-1]}" in readme
    assert f"**{served[-1]}** (the newest)" in readme
