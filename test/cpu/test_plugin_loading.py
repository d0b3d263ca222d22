"""The ``specinit`` entry point is discovered by SGLang and registers all of its hooks or none.

Every ``load_plugins()`` check runs in a fresh interpreter: ``load_plugins()`` runs once per
process and applied hooks cannot be taken back, so pytest's own interpreter must stay clean.
The probe prints one JSON line with what ``HookRegistry`` holds afterwards, which of the
plugin's phase methods ended up on SGLang's classes, and every log record. All probes of the
module run side by side from one fixture (each one imports SGLang, ~6 s of CPU).

The scheduler-side check starts a real (non-speculative, so quick) CPU Engine and reads the
hooks the scheduler process itself applied from the harness report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from harness.engine import ENGINE_TEST_TIMEOUT_S, cpu_engine
from sglang_specinit import plugin

PROBE_MARK = "SPECINIT_PROBE "
PROBE_TIMEOUT_S = 240
PROBE_WORKERS = 4
PLUGIN_NAME = "specinit"

# The probe: optional setup code, then load_plugins(), then a JSON summary on stdout.
_PROBE = """
import importlib.metadata, json, logging, pkgutil, sys

records = []

class _Collect(logging.Handler):
    def emit(self, record):
        records.append({
            "logger": record.name,
            "level": record.levelname,
            "message": record.getMessage(),
            "has_traceback": record.exc_info is not None,
        })

logging.getLogger().addHandler(_Collect())
logging.getLogger().setLevel(logging.INFO)

#SETUP#

from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry

load_plugins()
specinit_imported = any(m.startswith("sglang_specinit") for m in sys.modules)

new_methods = {}
for class_path, name in json.loads(sys.argv[1]):
    try:
        value = vars(pkgutil.resolve_name(class_path)).get(name)
    except (ImportError, AttributeError) as exc:
        new_methods[class_path + "." + name] = "class missing: " + repr(exc)
        continue
    new_methods[class_path + "." + name] = getattr(value, "__module__", None)

import sglang
print(#MARK# + json.dumps({
    "hooks": {
        target: [getattr(src, "plugin_name", None) for _, _, src in hooks]
        for target, hooks in HookRegistry._hooks.items()
    },
    "patched": sorted(HookRegistry._patched),
    "specinit_imported": specinit_imported,
    "new_methods": new_methods,
    "records": records,
    "sglang_version": importlib.metadata.version("sglang"),
    "sglang_file": sglang.__file__,
}))
"""


def hook_targets() -> set[str]:
    return {target for target, _, _ in plugin.hook_table()}


def new_methods() -> list[tuple[str, str]]:
    return [(class_path, name) for class_path, name, _ in plugin.new_method_table()]


def probe_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without anything that selects or configures plugins/shims."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SGLANG_SPECINIT_", "SPECINIT_TEST_")) and k != "SGLANG_PLUGINS"
    }
    env.update({"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1"})
    env.update(extra or {})
    return env


def run_probe(setup: str = "", *, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``setup`` then ``load_plugins()`` in a fresh interpreter; return the probe summary."""
    code = _PROBE.replace("#SETUP#", textwrap.dedent(setup)).replace("#MARK#", repr(PROBE_MARK))
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(new_methods())],
        env=probe_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(PROBE_MARK)]
    assert proc.returncode == 0 and len(lines) == 1, (
        f"probe failed (rc={proc.returncode})\n--- stdout ---\n{proc.stdout[-4000:]}"
        f"\n--- stderr ---\n{proc.stderr[-4000:]}"
    )
    return json.loads(lines[0][len(PROBE_MARK) :])


def specinit_hooks(summary: dict[str, Any]) -> dict[str, list[str | None]]:
    """Targets holding at least one hook registered by the specinit plugin."""
    return {
        target: sources
        for target, sources in summary["hooks"].items()
        if PLUGIN_NAME in sources or target in hook_targets()
    }


def added_methods(summary: dict[str, Any]) -> list[str]:
    """Phase methods the plugin put on SGLang classes in that process."""
    return sorted(
        key
        for key, module in summary["new_methods"].items()
        if isinstance(module, str) and module.startswith("sglang_specinit")
    )


def specinit_records(summary: dict[str, Any], level: str | None = None) -> list[dict[str, Any]]:
    return [
        r
        for r in summary["records"]
        if r["logger"].startswith("sglang_specinit") and (level is None or r["level"] == level)
    ]


def assert_nothing_patched(summary: dict[str, Any]) -> None:
    assert specinit_hooks(summary) == {}, specinit_hooks(summary)
    assert not set(summary["patched"]) & hook_targets(), summary["patched"]
    assert added_methods(summary) == []


# --------------------------------------------------------------------------- scenarios

# (what the probe breaks before load_plugins(), the dotted name the warning must cite)
BROKEN_SGLANG = {
    "hooked-target-missing": (
        "import sglang.srt.managers.scheduler as m\ndel m.Scheduler.init_model_worker",
        "sglang.srt.managers.scheduler.Scheduler.init_model_worker",
    ),
    "called-method-missing": (
        "import sglang.srt.model_executor.model_runner as m\ndel m.ModelRunner.init_device_graphs",
        "sglang.srt.model_executor.model_runner.ModelRunner.init_device_graphs",
    ),
    # A class that receives phase methods (and is not itself hooked) is gone.
    "phased-class-missing": (
        "import sglang.srt.speculative.dflash_worker as m\ndel m.DFlashWorker",
        "sglang.srt.speculative.dflash_worker.DFlashWorker",
    ),
    "hooked-signature-changed": (
        "import sglang.srt.model_executor.model_runner as m\n"
        "def initialize(self, free_memory_before_load): pass\n"
        "m.ModelRunner.initialize = initialize",
        "sglang.srt.model_executor.model_runner.ModelRunner.initialize",
    ),
}

# name -> (setup code, extra environment)
SCENARIOS: dict[str, tuple[str, dict[str, str]]] = {
    "default": ("", {}),
    "SGLANG_SPECINIT_DISABLE": ("", {"SGLANG_SPECINIT_DISABLE": "1"}),
    "SGLANG_PLUGINS": ("", {"SGLANG_PLUGINS": "some-other-plugin"}),
    **{name: (setup, {}) for name, (setup, _) in BROKEN_SGLANG.items()},
    "sglang-0.5.12": (
        "import sglang_specinit.compat as _compat\n"
        "_compat.installed_sglang_version = lambda: '0.5.12'\n",
        {},
    ),
}


@pytest.fixture(scope="module")
def probe() -> Callable[[str], dict[str, Any]]:
    """``probe(name)``: the summary of scenario ``name``; all scenarios run concurrently."""
    with ThreadPoolExecutor(PROBE_WORKERS) as pool:
        futures = {
            name: pool.submit(run_probe, setup, env=probe_env(extra))
            for name, (setup, extra) in SCENARIOS.items()
        }

    def get(name: str) -> dict[str, Any]:
        return futures[name].result()

    return get


# --------------------------------------------------------------------------- discovery


def test_entry_point_is_declared() -> None:
    (ep,) = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == PLUGIN_NAME]
    assert ep.value == "sglang_specinit.plugin:register"
    assert ep.load() is plugin.register


@pytest.mark.timeout(PROBE_TIMEOUT_S * 2)
def test_fresh_interpreter_discovers_and_applies_every_hook(
    probe: Callable[[str], dict[str, Any]],
) -> None:
    summary = probe("default")
    hooks = specinit_hooks(summary)
    # Every hook came through the entry point (HookRegistry records the plugin's name) ...
    assert set(hooks) == hook_targets()
    assert all(sources == [PLUGIN_NAME] for sources in hooks.values()), hooks
    # ... and was applied, not only registered.
    assert hook_targets() <= set(summary["patched"])
    # Every phase method is on its class, e.g. TpModelWorker.alloc_memory_pool.
    assert added_methods(summary) == sorted(f"{c}.{n}" for c, n in new_methods())
    assert (
        summary["new_methods"]["sglang.srt.managers.tp_worker.TpModelWorker.alloc_memory_pool"]
        == "sglang_specinit.sglang_0_5_13.tp_worker"
    )
    (active,) = [r for r in specinit_records(summary, "INFO") if "active on sglang" in r["message"]]
    assert summary["sglang_version"] in active["message"]
    assert specinit_records(summary, "WARNING") == []


@pytest.mark.cpu_engine
@pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S)
def test_scheduler_process_applies_the_hooks(tiny_target: Path, tmp_path: Path) -> None:
    with cpu_engine(tiny_target, plugin=True, work_dir=tmp_path) as engine:
        report = engine.scheduler_report()
    assert report["pid"] != engine.proc.pid  # written by the spawned scheduler process
    assert report["sglang_plugins_env"] == PLUGIN_NAME
    assert report["specinit_loaded"]
    assert hook_targets() <= set(report["applied_hook_targets"])


# --------------------------------------------------------------------------- switched off


@pytest.mark.timeout(PROBE_TIMEOUT_S * 2)
@pytest.mark.parametrize(
    ("scenario", "imported"),
    [("SGLANG_SPECINIT_DISABLE", True), ("SGLANG_PLUGINS", False)],
)
def test_switched_off_registers_nothing(
    probe: Callable[[str], dict[str, Any]], scenario: str, imported: bool
) -> None:
    summary = probe(scenario)
    assert_nothing_patched(summary)
    # The whitelist keeps SGLang from even importing the entry point.
    assert summary["specinit_imported"] is imported
    assert specinit_records(summary, "WARNING") == []


# --------------------------------------------------------------------------- all or nothing


@pytest.mark.timeout(PROBE_TIMEOUT_S * 2)
@pytest.mark.parametrize("case", sorted(BROKEN_SGLANG))
def test_a_missing_or_changed_target_patches_nothing(
    probe: Callable[[str], dict[str, Any]], case: str
) -> None:
    summary = probe(case)
    assert_nothing_patched(summary)
    (warning,) = specinit_records(summary, "WARNING")
    assert "patched NOTHING" in warning["message"]
    assert BROKEN_SGLANG[case][1] in warning["message"]


@pytest.mark.timeout(PROBE_TIMEOUT_S)
def test_strict_mode_stops_the_launch() -> None:
    """SGLang's load_plugins() logs and swallows a plugin's Exception and starts anyway; in
    STRICT mode the plugin's error must stop the process instead, naming what is missing."""
    setup, missing = BROKEN_SGLANG["hooked-target-missing"]
    code = _PROBE.replace("#SETUP#", textwrap.dedent(setup)).replace("#MARK#", repr(PROBE_MARK))
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(new_methods())],
        env=probe_env({"SGLANG_SPECINIT_STRICT": "1"}),
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
    )
    assert proc.returncode != 0
    assert PROBE_MARK not in proc.stdout  # load_plugins() never returned
    assert "patched NOTHING" in proc.stderr and missing in proc.stderr, proc.stderr[-2000:]


@pytest.mark.timeout(PROBE_TIMEOUT_S * 2)
def test_unsupported_sglang_version_patches_nothing(
    probe: Callable[[str], dict[str, Any]],
) -> None:
    summary = probe("sglang-0.5.12")
    assert_nothing_patched(summary)
    (warning,) = specinit_records(summary, "WARNING")
    assert "patched NOTHING" in warning["message"]
    assert "0.5.12" in warning["message"] and "not one of the supported" in warning["message"]
