"""The package's layout rule, read from the source: one package per API generation over a
release-free core."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import sglang_specinit
from sglang_specinit import compat

PACKAGE = Path(sglang_specinit.__file__).parent
ADAPTER = re.compile(r"^sglang_0_5_\d+$")
RELEASE_IN_NAME = re.compile(r"0_5_\d+")


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def _adapter_of(path: Path) -> str | None:
    first = path.relative_to(PACKAGE).parts[0]
    return first if ADAPTER.match(first) else None


def _imported_adapters(path: Path) -> set[str]:
    """Adapter packages ``path`` imports, at module level or inside a function."""
    return _adapters_imported_by(path.read_text(), _adapter_of(path))


def _adapters_imported_by(source: str, own: str | None) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside the same package
                continue
            base = node.module or ""
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "sglang_specinit" and len(parts) > 1 and ADAPTER.match(parts[1]):
                if parts[1] != own:
                    found.add(parts[1])
    return found


def test_the_adapters_are_the_registry_s():
    on_disk = {p.name for p in PACKAGE.iterdir() if p.is_dir() and ADAPTER.match(p.name)}
    assert on_disk == set(compat.generations())


def test_core_imports_no_adapter_by_name():
    offenders = {
        str(p.relative_to(PACKAGE)): sorted(_imported_adapters(p))
        for p in _modules()
        if _adapter_of(p) is None and _imported_adapters(p)
    }
    assert offenders == {}


def test_adapters_import_only_the_core():
    arrows = {
        str(p.relative_to(PACKAGE)): sorted(_imported_adapters(p))
        for p in _modules()
        if _adapter_of(p) is not None and _imported_adapters(p)
    }
    assert arrows == {}


def test_no_core_file_function_or_class_names_a_release():
    named = []
    for path in _modules():
        if _adapter_of(path) is not None:
            continue
        rel = str(path.relative_to(PACKAGE))
        if RELEASE_IN_NAME.search(path.name):
            named.append(rel)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if RELEASE_IN_NAME.search(node.name):
                    named.append(f"{rel}:{node.name}")
    assert named == []


def test_the_checks_see_an_arrow():
    source = "def f():\n    from sglang_specinit.sglang_0_5_23 import eagle\n"
    assert _adapters_imported_by(source, "sglang_0_5_14") == {"sglang_0_5_23"}
    assert _adapters_imported_by(source, None) == {"sglang_0_5_23"}
    assert _adapters_imported_by(source, "sglang_0_5_23") == set()
    assert _adapters_imported_by("import sglang_specinit.sglang_0_5_13.specs\n", None) == {
        "sglang_0_5_13"
    }

