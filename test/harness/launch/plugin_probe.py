"""A fresh interpreter (the plugin registers once per process) that runs ``load_plugins()`` and
prints one :data:`MARK` + JSON line of what it saw, for the tests of the real entry point."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
MARK = "SPECINIT_PROBE "

# Prepended to every probe: the records its summary reports (logger, level, message).
LOG_COLLECTOR = """
import logging

records = []

class _Collect(logging.Handler):
    def emit(self, record):
        records.append({"logger": record.name, "level": record.levelname,
                        "message": record.getMessage()})

logging.getLogger().addHandler(_Collect())
logging.getLogger().setLevel(logging.INFO)
"""


def probe_env(**extra: str) -> dict[str, str]:
    """This env without the plugin's, the test run's, PYTHONPATH, SGLANG_PLUGINS; plus ``extra``."""
    dropped = ("SGLANG_PLUGINS", "PYTHONPATH")
    prefixes = ("SGLANG_SPECINIT_", "SPECINIT_TEST_")
    kept = {k: v for k, v in os.environ.items() if not k.startswith(prefixes) and k not in dropped}
    return {**kept, **extra}


def same_packages_path() -> str:
    """``PYTHONPATH`` entries that make a probe import the ``sglang`` and ``sglang_specinit`` this
    process does (a sibling wheel, a worktree's ``python/``), not the venv's own."""
    import importlib.util

    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    inherited = {str(Path(entry).resolve()) for entry in entries if entry}
    specs = [importlib.util.find_spec(package) for package in ("sglang", "sglang_specinit")]
    found = [spec.origin for spec in specs if spec is not None and spec.origin is not None]
    roots = [str(Path(origin).resolve().parents[1]) for origin in found]
    return os.pathsep.join(root for root in roots if root in inherited)


def run_probe(
    python: str, probe: str, args: Sequence[str], env: dict[str, str], timeout_s: float
) -> dict[str, Any]:
    """Run ``LOG_COLLECTOR + probe`` with ``args`` + :data:`MARK`; the marked line's JSON."""
    proc = subprocess.run(
        [python, "-c", LOG_COLLECTOR + probe, *args, MARK],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=str(REPO_ROOT),
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    assert proc.returncode == 0 and len(lines) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[0][len(MARK) :])


# After LOG_COLLECTOR: load_plugins(), import argv[1]'s modules, then HookRegistry's table and which
# of argv[2]'s (class path, name) methods sglang_specinit added.
REGISTRY_PROBE = """
import importlib, importlib.metadata, json, pkgutil, sys

import sglang
from sglang.srt.plugins import load_plugins

load_plugins()
specinit_imported = "sglang_specinit.plugin" in sys.modules
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
sys.path.insert(0, "test")  # cwd is the repository
from harness.hook_state import hook_registry_state

registry = hook_registry_state()
added = []
for class_path, name in json.loads(sys.argv[2]):
    try:
        value = vars(pkgutil.resolve_name(class_path)).get(name)
    except (ImportError, AttributeError):
        continue
    if getattr(value, "__module__", "").startswith("sglang_specinit"):
        added.append(class_path + "." + name)

print(sys.argv[3] + json.dumps({
    "sglang_version": importlib.metadata.version("sglang"),
    "sglang_file": sglang.__file__,
    "hooks": {t: list(names) for t, names in registry.registered.items()},
    "patched": sorted(registry.applied),
    "added_methods": added,
    "specinit_imported": specinit_imported,
    "records": records,
}))
"""


def registry_probe(
    python: str,
    env: dict[str, str],
    timeout_s: float,
    modules: Sequence[str] = (),
    methods: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    """:data:`REGISTRY_PROBE`'s summary: ``modules`` imported, ``methods`` (class path, name)."""
    args = [json.dumps(list(modules)), json.dumps(list(methods))]
    return run_probe(python, REGISTRY_PROBE, args, env, timeout_s)
