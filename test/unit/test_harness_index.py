"""The harness's index names every module, and importing the index stays cheap."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1] / "harness"
# Directories that are not Python packages of the harness but path entries (PYTHONPATH).
PATH_ENTRIES = {"site", "sgl_kernel_stub"}


def _docstring(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""


def _named(doc: str) -> set[str]:
    return set(re.findall(r"``([a-z0-9_]+)(?:/[a-z_.]*)?``", doc))


def _packages() -> list[Path]:
    return sorted(p.parent for p in HARNESS.glob("*/__init__.py"))


def _modules(package: Path) -> set[str]:
    return {p.stem for p in package.glob("*.py") if p.stem != "__init__"}


def _all_modules() -> set[str]:
    out = _modules(HARNESS)
    for package in _packages():
        out |= _modules(package)
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
        assert listed == _modules(package) | entries, f"test/harness/{package.name}/__init__.py"


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
