"""The package's layout, read from the source: a core module (outside the ``sglang_0_5_*``
adapter packages) imports no adapter and names no release anywhere; an adapter imports only the
core and itself; every SGLang module the core imports exists in the installed release. The core
reaches release code only through ``compat.generations()``. The test harness's index names every
module, and importing the index stays cheap."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sglang_specinit
from sglang_specinit import compat

PACKAGE = Path(sglang_specinit.__file__).parent
ADAPTER = re.compile(r"^sglang_0_5_\d+$")
# A release spelled in any form: "0.5.23", (0, 5, 14), stock_0_5_13.
RELEASE_ANYWHERE = re.compile(r"\b0\.5\.\d+|\(\s*0\s*,\s*5\s*,\s*\d+|0_5_\d+")


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def _adapter_of(path: Path) -> str | None:
    first = path.relative_to(PACKAGE).parts[0]
    return first if ADAPTER.match(first) else None


def _adapters_imported_by(source: str, own: str | None) -> set[str]:
    """Adapter packages other than ``own`` that ``source`` imports (module level or in a def)."""
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


def test_no_module_imports_another_adapter_by_name():
    """The core imports no adapter; an adapter imports only the core and itself."""
    arrows = {
        str(p.relative_to(PACKAGE)): sorted(found)
        for p in _modules()
        if (found := _adapters_imported_by(p.read_text(), _adapter_of(p)))
    }
    assert arrows == {}


def _release_mentions(source: str) -> list[str]:
    """Every release ``source`` names, in code, strings, docstrings or comments."""
    return sorted(RELEASE_ANYWHERE.findall(source))


def test_no_core_module_names_a_release():
    """Not in its file name, nor in its code (a name), strings, docstrings or comments."""
    named = {
        str(p.relative_to(PACKAGE)): _release_mentions(f"{p.name}\n{p.read_text()}")
        for p in _modules()
        if _adapter_of(p) is None and _release_mentions(f"{p.name}\n{p.read_text()}")
    }
    assert named == {}


def test_the_release_reader_sees_every_spelling():
    spellings = {
        'X = "0.5.23"\n': ["0.5.23"],
        "if key >= (0, 5, 14):\n": ["(0, 5, 14"],
        "# since 0.5.13.post1\n": ["0.5.13"],
        'KEY = "stock_0_5_13"\n': ["0_5_13"],
        "x = (0,5,16, 0)\n": ["(0,5,16"],
    }
    for source, found in spellings.items():
        assert _release_mentions(source) == found
    assert _release_mentions('__version__ = "0.1.0"\nx = (0, 6)\n') == []


def _sglang_imports(source: str) -> set[str]:
    """``sglang.*`` modules (or ``module.name`` of a ``from`` import) ``source`` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {name for name in found if name.split(".")[0] == "sglang"}


def _missing_in(root: Path, dotted: str) -> bool:
    """Whether ``dotted`` (a module, or a module's name) is absent from the sglang tree at
    ``root``, read from files only: a name is taken to be in a module whose source mentions it
    or star-imports."""
    parts = dotted.split(".")[1:]
    if not parts:
        return False
    path = root.joinpath(*parts)
    if path.is_dir() or path.with_suffix(".py").is_file():
        return False
    parent = path.parent
    source = parent.with_suffix(".py") if parent != root else root / "__init__.py"
    if parent.is_dir():
        source = parent / "__init__.py"
    if not source.is_file():
        return True
    text = source.read_text()
    return "import *" not in text and re.search(rf"\b{re.escape(parts[-1])}\b", text) is None


def test_core_imports_only_what_the_installed_release_has():
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("sglang is not installed")
    root = Path(list(spec.submodule_search_locations)[0])
    imported = {
        name
        for p in _modules()
        if _adapter_of(p) is None
        for name in _sglang_imports(p.read_text())
    }
    assert {name for name in imported if _missing_in(root, name)} == set()


def test_the_import_reader_sees_a_missing_module(tmp_path: Path):
    (tmp_path / "srt" / "utils").mkdir(parents=True)
    (tmp_path / "srt" / "utils" / "__init__.py").write_text("from .common import is_cpu\n")
    (tmp_path / "srt" / "utils" / "common.py").write_text("x = 1\n")
    source = (
        "def f():\n    from sglang.srt.utils import is_cpu, gone\n"
        "    from sglang.srt.utils.common import x\n    import sglang.srt.absent\n"
    )
    found = _sglang_imports(source)
    assert found == {
        "sglang.srt.utils.is_cpu",
        "sglang.srt.utils.gone",
        "sglang.srt.utils.common.x",
        "sglang.srt.absent",
    }
    assert {n for n in found if _missing_in(tmp_path, n)} == {
        "sglang.srt.utils.gone",
        "sglang.srt.absent",
    }


def test_the_checks_see_an_arrow():
    source = "def f():\n    from sglang_specinit.sglang_0_5_23 import eagle\n"
    assert _adapters_imported_by(source, "sglang_0_5_14") == {"sglang_0_5_23"}
    assert _adapters_imported_by(source, None) == {"sglang_0_5_23"}
    assert _adapters_imported_by(source, "sglang_0_5_23") == set()
    assert _adapters_imported_by("import sglang_specinit.sglang_0_5_13.specs\n", None) == {
        "sglang_0_5_13"
    }


# The test harness (``test/harness``)

HARNESS = Path(__file__).resolve().parents[1] / "harness"
# Directories that are not Python packages of the harness but path entries (PYTHONPATH).
PATH_ENTRIES = {"site", "sgl_kernel_stub"}


def _docstring(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""


def _named(doc: str) -> set[str]:
    return set(re.findall(r"``([a-z0-9_]+)(?:/[a-z_.]*)?``", doc))


def _packages() -> list[Path]:
    return sorted(p.parent for p in HARNESS.glob("*/__init__.py"))


def _stems(package: Path) -> set[str]:
    return {p.stem for p in package.glob("*.py") if p.stem != "__init__"}


def _all_modules() -> set[str]:
    out = _stems(HARNESS)
    for package in _packages():
        out |= _stems(package)
    return out


def test_every_module_and_sub_package_is_in_the_top_level_index() -> None:
    named = _named(_docstring(HARNESS))
    missing = (_all_modules() | {p.name for p in _packages()}) - named
    assert missing == set(), "add them to test/harness/__init__.py"


def test_each_sub_package_index_lists_exactly_its_modules() -> None:
    for package in _packages():
        doc = _docstring(package)
        listed = set(re.findall(r"^- ``([a-z0-9_]+)(?:/[a-z_.]*)?``", doc, re.M))
        entries = {d.name for d in package.iterdir() if d.is_dir() and d.name in PATH_ENTRIES}
        assert listed == _stems(package) | entries, f"test/harness/{package.name}/__init__.py"


def test_importing_the_harness_index_imports_neither_torch_nor_sglang() -> None:
    packages = ["harness", *(f"harness.{p.name}" for p in _packages())]
    # The checkpoint modules promise the same (their writers import torch when they run).
    families = ("deepseek_mla", "eagle_drafts", "gemma4_mtp", "llama_family", "mimo_v2_mtp")
    packages += [f"harness.checkpoints.{m}" for m in (*families, "tiny_configs")]
    code = (
        f"import sys; import {', '.join(packages)}; "
        "heavy = sorted(m for m in ('torch', 'sglang', 'transformers') if m in sys.modules); "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=HARNESS.parent,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(HARNESS.parent), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
