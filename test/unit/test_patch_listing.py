"""``sglang-specinit patches``: the listing is the adapters' own tables, each plugin function
at the line it is defined, and it imports nothing of SGLang."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sglang_specinit import compat
from sglang_specinit.hooks import adapter_patches
from sglang_specinit.planner.cli import main

ROW = re.compile(
    r"^  (?P<entry>hook|adds|requires) +(?P<kind>[A-Z]+)? +(?P<target>\S+)"
    r"(?: +<- (?P<fn>\S+)  \((?P<module>[\w.]+):(?P<line>\d+)\))?$"
)


def listed(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, list[tuple]]:
    """(header, rows) of one ``patches`` run; a row is (sglang module, entry, kind, target,
    plugin function, its module, its line)."""
    assert main(["patches", *argv]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    rows, module = [], None
    for line in lines:
        if not line.startswith(" "):
            module = line
            continue
        match = ROW.match(line)
        assert match, line
        g = match.groupdict()
        line_no = int(g["line"]) if g["line"] else None
        rows.append((module, g["entry"], g["kind"], g["target"], g["fn"], g["module"], line_no))
    return header, rows


def expected_rows(release: str) -> list[tuple]:
    """The same rows read from the adapter's tables (without the line numbers)."""
    adapter = compat.load_adapter(compat.decide_for_version(release).adapter)
    rows = []
    for module, patch in adapter_patches(adapter, release).items():
        rows += [
            (module, "hook", h.kind, h.qualname, h.fn.__qualname__, h.fn.__module__)
            for h in patch.hooks
        ]
        rows += [
            (module, "adds", None, f"{m.class_name}.{m.name}", m.fn.__qualname__, m.fn.__module__)
            for m in patch.new_methods
        ]
        rows += [(module, "requires", None, r.qualname, None, None) for r in patch.requires]
    return rows


def defines(module: str, line_no: int, name: str) -> bool:
    """Line ``line_no`` of ``module``'s source is ``def name`` or the first of its decorators
    (the first ``def`` from there on is ``name``'s)."""
    source = Path(importlib.util.find_spec(module).origin).read_text().splitlines()
    first = source[line_no - 1].strip()
    if not first.startswith(("@", f"def {name}(")):
        return False
    defs = (line.strip() for line in source[line_no - 1 :] if line.startswith("def "))
    return next(defs).startswith(f"def {name}(")


@pytest.mark.parametrize("release", ["0.5.13.post1", "0.5.23"])
def test_lists_every_table_entry_where_its_function_is_defined(
    capsys: pytest.CaptureFixture[str], release: str
) -> None:
    header, rows = listed(capsys, "--release", release)
    assert [row[:6] for row in rows] == expected_rows(release)
    hooks = sum(row[1] == "hook" for row in rows)
    assert header.startswith(f"sglang {release}: adapter sglang_specinit.sglang_0_5_")
    assert f" {hooks} hooks," in header
    for _, _, _, target, fn, module, line_no in rows:
        if fn is not None:
            assert defines(module, line_no, fn.rsplit(".", 1)[-1]), (target, module, line_no)


def test_default_release_is_the_installed_one(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    installed = version("sglang")
    default = listed(capsys)
    assert default == listed(capsys, "--release", installed)


def test_listing_imports_no_sglang_module() -> None:
    code = (
        "import contextlib, io, json, sys\n"
        "from sglang_specinit.planner.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    codes = [main(['patches', '--release', r]) for r in ('0.5.13.post1', '0.5.23')]\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('sglang.', 'torch')))\n"
        "loaded += ['sglang'] if 'sglang' in sys.modules else []\n"
        "print(json.dumps([codes, loaded]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert json.loads(out) == [[0, 0], []]
