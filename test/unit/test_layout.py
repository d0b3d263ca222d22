"""The package's layout, from the source: the core (outside ``sglang_0_5_*``) imports no adapter,
names no release and imports only what the installed SGLang has; an adapter imports only the core
and itself. The harness's indexes name every module, and importing them stays cheap."""

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
MODULES = sorted(PACKAGE.rglob("*.py"))


def _adapter_of(path: Path) -> str | None:
    first = path.relative_to(PACKAGE).parts[0]
    return first if ADAPTER.match(first) else None


CORE = [p for p in MODULES if _adapter_of(p) is None]


def _imports(source: str) -> set[str]:
    """Every absolute import of ``source`` (module level or in a def): ``module`` of an
    ``import``, ``module`` and ``module.name`` of a ``from`` import."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.update([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
    return found


def _adapters_imported_by(source: str, own: str | None) -> set[str]:
    """Adapter packages other than ``own`` that ``source`` imports."""
    parts = [name.split(".") for name in _imports(source)]
    return {
        p[1]
        for p in parts
        if p[0] == "sglang_specinit" and len(p) > 1 and ADAPTER.match(p[1]) and p[1] != own
    }


def test_the_adapters_are_the_registry_s_and_none_imports_another_by_name():
    """The core imports no adapter; an adapter imports only the core and itself."""
    on_disk = {p.name for p in PACKAGE.iterdir() if p.is_dir() and ADAPTER.match(p.name)}
    assert on_disk == set(compat.generations())
    arrows = {
        str(p.relative_to(PACKAGE)): found
        for p in MODULES
        if (found := _adapters_imported_by(p.read_text(), _adapter_of(p)))
    }
    assert arrows == {}


def test_no_core_module_names_a_release():
    """Not in its file name, nor in its code (a name), strings, docstrings or comments."""
    named = {
        str(p.relative_to(PACKAGE)): found
        for p in CORE
        if (found := RELEASE_ANYWHERE.findall(f"{p.name}\n{p.read_text()}"))
    }
    assert named == {}


def _missing_in(root: Path, dotted: str) -> bool:
    """Whether ``dotted`` is absent from the sglang tree at ``root`` (from files: a name is in a
    module whose source mentions it or star-imports)."""
    parts = dotted.split(".")[1:]
    path = root.joinpath(*parts)
    if not parts or path.is_dir() or path.with_suffix(".py").is_file():
        return False
    parent = path.parent
    source = parent / "__init__.py" if parent.is_dir() else parent.with_suffix(".py")
    if not source.is_file():
        return True
    text = source.read_text()
    return "import *" not in text and re.search(rf"\b{re.escape(parts[-1])}\b", text) is None


def _missing_sglang_imports(root: Path, source: str) -> set[str]:
    return {n for n in _imports(source) if n.split(".")[0] == "sglang" and _missing_in(root, n)}


def test_core_imports_only_what_the_installed_release_has():
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("sglang is not installed")
    root = Path(list(spec.submodule_search_locations)[0])
    assert set().union(*(_missing_sglang_imports(root, p.read_text()) for p in CORE)) == set()


def test_the_readers_see_every_spelling_a_missing_module_and_an_arrow(tmp_path: Path):
    spellings = {
        'X = "0.5.23"\n': ["0.5.23"],
        "if key >= (0, 5, 14):\n": ["(0, 5, 14"],
        "# since 0.5.13.post1\n": ["0.5.13"],
        'KEY = "stock_0_5_13"\n': ["0_5_13"],
        "x = (0,5,16, 0)\n": ["(0,5,16"],
        '__version__ = "0.1.0"\nx = (0, 6)\n': [],
    }
    for source, found in spellings.items():
        assert RELEASE_ANYWHERE.findall(source) == found
    (tmp_path / "srt" / "utils").mkdir(parents=True)
    (tmp_path / "srt" / "utils" / "__init__.py").write_text("from .common import is_cpu\n")
    (tmp_path / "srt" / "utils" / "common.py").write_text("x = 1\n")
    source = (
        "def f():\n    from sglang.srt.utils import is_cpu, gone\n"
        "    from sglang.srt.utils.common import x\n    import sglang.srt.absent\n"
    )
    found = {"sglang.srt.utils.is_cpu", "sglang.srt.utils.gone", "sglang.srt.utils.common.x"}
    assert found | {"sglang.srt.absent"} <= _imports(source)
    missing = {"sglang.srt.utils.gone", "sglang.srt.absent"}
    assert _missing_sglang_imports(tmp_path, source) == missing
    source = "def f():\n    from sglang_specinit.sglang_0_5_23 import eagle\n"
    assert _adapters_imported_by(source, "sglang_0_5_14") == {"sglang_0_5_23"}
    assert _adapters_imported_by(source, None) == {"sglang_0_5_23"}
    assert _adapters_imported_by(source, "sglang_0_5_23") == set()
    source = "import sglang_specinit.sglang_0_5_13.specs\n"
    assert _adapters_imported_by(source, None) == {"sglang_0_5_13"}


# The test harness (``test/harness``)

HARNESS = Path(__file__).resolve().parents[1] / "harness"
# Directories that are not Python packages of the harness but path entries (PYTHONPATH).
PATH_ENTRIES = {"site", "sgl_kernel_stub"}
SUB_PACKAGES = sorted(p.parent for p in HARNESS.glob("*/__init__.py"))


def _docstring(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""


def _stems(package: Path) -> set[str]:
    return {p.stem for p in package.glob("*.py") if p.stem != "__init__"}


def test_the_top_level_index_names_everything_and_each_sub_package_s_exactly_its_modules() -> None:
    named = set(re.findall(r"``([a-z0-9_]+)(?:/[a-z_.]*)?``", _docstring(HARNESS)))
    everything = _stems(HARNESS).union(*map(_stems, SUB_PACKAGES), (p.name for p in SUB_PACKAGES))
    assert everything - named == set(), "add them to test/harness/__init__.py"
    for package in SUB_PACKAGES:
        listed = set(re.findall(r"^- ``([a-z0-9_]+)(?:/[a-z_.]*)?``", _docstring(package), re.M))
        entries = {d.name for d in package.iterdir() if d.is_dir() and d.name in PATH_ENTRIES}
        assert listed == _stems(package) | entries, f"test/harness/{package.name}/__init__.py"


def test_importing_the_harness_index_imports_neither_torch_nor_sglang() -> None:
    packages = ["harness", *(f"harness.{p.name}" for p in SUB_PACKAGES)]
    # The checkpoint modules promise the same (their writers import torch when they run).
    families = ("eagle_drafts", "gemma4_mtp", "llama_family", "mimo_v2_mtp")
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
