"""The ``specinit`` entry point is discovered by SGLang, patches each SGLang module only once
SGLang imports it, and patches everything a launch uses or nothing of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import entry_points
from typing import Any

import pytest
from harness.launch import plugin_probe
from harness.launch.plugin_probe import LOG_COLLECTOR
from harness.launch.plugin_probe import MARK as PROBE_MARK
from sglang_specinit import plugin, sglang_0_5_13
from sglang_specinit.hooks import adapter_patches

PROBE_TIMEOUT_S = 240
PROBE_WORKERS = 4
PLUGIN_NAME = "specinit"
pytestmark = pytest.mark.timeout(PROBE_TIMEOUT_S * 4)  # the module's probes run concurrently

# The probe: the log collector, optional setup code, then load_plugins(), then a JSON summary
# (after argv[2], the mark).
_PROBE = """
import importlib.metadata, json, sys

#SETUP#

from sglang.srt.plugins import load_plugins

before = set(sys.modules)
load_plugins()
imported_by_load = sorted(set(sys.modules) - before)
specinit_imported = any(m.startswith("sglang_specinit") for m in sys.modules)
sys.path.insert(0, "test")  # cwd is the repository: harness.hook_state, stdlib only
from harness.hook_state import hook_registry_state  # read after the checks above

patched_at_load = sorted(hook_registry_state().applied)

def phase_methods():
    found = {}
    for module_name, class_name, name in json.loads(sys.argv[1]):
        # Only modules already imported: looking at a class must not import (and so patch) it.
        cls = getattr(sys.modules.get(module_name), class_name, None)
        method = vars(cls).get(name) if cls is not None else None
        found[f"{module_name}.{class_name}.{name}"] = getattr(method, "__module__", None)
    return found

new_methods_at_load = phase_methods()
extra = None  # what the code after load reports of its own

#AFTER#

registry = hook_registry_state()
print(sys.argv[2] + json.dumps({
    "hooks": {target: list(names) for target, names in registry.registered.items()},
    "patched": sorted(registry.applied),
    "patched_at_load": patched_at_load,
    "imported_by_load": imported_by_load,
    "specinit_imported": specinit_imported,
    "new_methods": phase_methods(),
    "new_methods_at_load": new_methods_at_load,
    "extra": extra,
    "records": records,
    "sglang_version": importlib.metadata.version("sglang"),
}))
"""


# What a scheduler imports during a launch: every module the adapter patches.
IMPORT_PATCHED_MODULES = (
    "import importlib\n"
    "from sglang_specinit import sglang_0_5_13\n"
    "from sglang_specinit.hooks import adapter_patches\n"
    "for name in adapter_patches(sglang_0_5_13):\n"
    "    importlib.import_module(name)\n"
)
PATCHES = list(adapter_patches(sglang_0_5_13).values())
HOOK_TARGETS = {hook.target for patch in PATCHES for hook in patch.hooks}
NEW_METHODS = [(m.module, m.class_name, m.name) for p in PATCHES for m in p.new_methods]


def probe_process(setup: str, after: str, extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``setup``, ``load_plugins()``, then ``after`` in a fresh interpreter, in the caller's
    environment without anything that selects or configures plugins/shims (plus ``extra_env``)."""
    code = LOG_COLLECTOR + _PROBE.replace("#SETUP#", setup).replace("#AFTER#", after)
    env = plugin_probe.probe_env(
        SGLANG_USE_CPU_ENGINE="1",
        HF_HUB_OFFLINE="1",
        PYTHONPATH=plugin_probe.same_packages_path(),
        **extra_env,
    )
    return subprocess.run(
        [sys.executable, "-c", code, json.dumps(NEW_METHODS), PROBE_MARK],
        env=env,
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
    )


def summary_of(proc: subprocess.CompletedProcess) -> dict[str, Any]:
    """The probe's summary of one scenario (it must run to its end)."""
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
        if PLUGIN_NAME in sources or target in HOOK_TARGETS
    }


def added_methods(summary: dict[str, Any], key: str = "new_methods") -> list[str]:
    """Phase methods the plugin had put on SGLang classes in that process (at its end)."""
    return sorted(
        name
        for name, module in summary[key].items()
        if isinstance(module, str) and module.startswith("sglang_specinit")
    )


def specinit_records(summary: dict[str, Any], level: str | None = None) -> list[dict[str, Any]]:
    records = [r for r in summary["records"] if r["logger"].startswith("sglang_specinit")]
    return [r for r in records if level in (None, r["level"])]


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

# A changed sglang build (test double): ``dflash_worker``, imported after load, lacks DFlashWorker.
CHANGED_LATER_MODULE = "sglang.srt.speculative.dflash_worker"
CHANGED_LATER_SETUP = f"""
import importlib.abc, importlib.util, sys

class _ChangedBuild(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == {CHANGED_LATER_MODULE!r}:
            return importlib.util.spec_from_loader(name, self)
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        module.DFlashWorkerRenamed = object

sys.meta_path.insert(0, _ChangedBuild())
"""
REPORT_PROBLEMS = """
import importlib
from sglang_specinit import sglang_0_5_13
from sglang_specinit.hooks import adapter_patches
failures = []
for name in adapter_patches(sglang_0_5_13):
    try:
        importlib.import_module(name)
    except Exception as exc:
        failures.append(repr(exc))
from sglang_specinit import compat
from sglang_specinit.sglang_0_5_13.launch_policy import LaunchFacts, phasing_blocker
problems = compat.problems_so_far()
facts = LaunchFacts("EAGLE", "cpu", False, lambda: None, compat_problems=problems)
extra = {"problems": problems, "failures": failures, "blocker": phasing_blocker(facts)}
"""
LAUNCHER_SETUP = "import sglang.srt.server_args\n"
SCHEDULER_FIRST = "import sglang.srt.managers.scheduler\n"
# Another plugin's hooks (as the harness's report hooks), registered before load_plugins():
# applying them imports the scheduler and the KV-cache mixin inside each other's import chains.
ANOTHER_PLUGIN_SETUP = """
from sglang.srt.plugins.hook_registry import HookRegistry, HookSource, HookType
_source = HookSource(plugin_name="another-plugin", dist_name=None)
def _around(original, *args, **kwargs):
    return original(*args, **kwargs)
def _before(*args, **kwargs):
    return None
HookRegistry.register(
    "sglang.srt.managers.scheduler.Scheduler.__init__", _around, HookType.AROUND, source=_source
)
HookRegistry.register(
    "sglang.srt.model_executor.model_runner_kv_cache_mixin.ModelRunnerKVCacheMixin"
    ".init_memory_pool",
    _before,
    HookType.BEFORE,
    source=_source,
)
"""

# Another plugin's hook on model_runner, and server_args imported before the plugin loads:
# patching server_args at once imports model_runner mid-install, which must still be patched.
RUNNER_HOOK_SETUP = """
import sys
from sglang.srt.plugins.hook_registry import HookRegistry, HookType
def _passthrough(original, self, *args, **kwargs):
    return original(self, *args, **kwargs)
HookRegistry.register(
    "sglang.srt.model_executor.model_runner.ModelRunner.init_cublas", _passthrough, HookType.AROUND
)
import sglang.srt.server_args
assert "sglang.srt.model_executor.model_runner" not in sys.modules
"""

STRICT = {"SGLANG_SPECINIT_STRICT": "1"}
TOO_OLD = "from sglang_specinit import compat\ncompat.installed_sglang_version = lambda: '0.5.12'"
# name -> (setup code, extra environment); after load_plugins() each imports what a scheduler
# does (IMPORT_PATCHED_MODULES), "changed-later" reports its problems (REPORT_PROBLEMS).
SCENARIOS: dict[str, tuple[str, dict[str, str]]] = {
    # A launcher's order (server_args imported before load_plugins()), then what a scheduler
    # imports: the launcher's view is the summary's state at load.
    "default": (LAUNCHER_SETUP, {}),
    "another-plugin": (ANOTHER_PLUGIN_SETUP, {}),
    "another-plugin-imports-model-runner": (RUNNER_HOOK_SETUP, {}),
    # A scheduler process has imported the scheduler module (spawn unpickles
    # run_scheduler_process) before it calls load_plugins().
    "another-plugin-scheduler-process": (SCHEDULER_FIRST + ANOTHER_PLUGIN_SETUP, {}),
    "SGLANG_SPECINIT_DISABLE": ("", {"SGLANG_SPECINIT_DISABLE": "1"}),
    "SGLANG_PLUGINS": (LAUNCHER_SETUP, {"SGLANG_PLUGINS": "some-other-plugin"}),
    **{name: (setup, {}) for name, (setup, _) in BROKEN_SGLANG.items()},
    "changed-later": (CHANGED_LATER_SETUP, {}),
    "sglang-0.5.12": (TOO_OLD, {}),
    # STRICT: a hooked target missing at load, a patched class missing from a later import.
    "strict-at-load": (BROKEN_SGLANG["hooked-target-missing"][0], STRICT),
    "strict-after-load": (CHANGED_LATER_SETUP, STRICT),
}


@pytest.fixture(scope="module")
def probe() -> Callable[..., Any]:
    """``probe(name)``: scenario ``name``'s summary (``to_end=False``: its process); run at once."""
    with ThreadPoolExecutor(PROBE_WORKERS) as pool:
        futures = {}
        for name, (setup, extra) in SCENARIOS.items():
            after = REPORT_PROBLEMS if name == "changed-later" else IMPORT_PATCHED_MODULES
            futures[name] = pool.submit(probe_process, setup, after, extra)

    def get(name: str, to_end: bool = True) -> Any:
        return summary_of(futures[name].result()) if to_end else futures[name].result()

    return get


# The plugin alone, and next to another plugin's hooks.
APPLIED = [name for name in SCENARIOS if name.startswith(("default", "another-plugin"))]


@pytest.mark.parametrize("scenario", APPLIED)
def test_every_hook_is_applied_once_sglang_imports_its_module(
    probe: Callable[[str], dict[str, Any]], scenario: str
) -> None:
    summary = probe(scenario)
    if scenario == "default":
        (ep,) = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == PLUGIN_NAME]
        assert ep.value == "sglang_specinit.plugin:register"
        assert ep.load() is plugin.register
        hooks = specinit_hooks(summary)
        # Every hook came through the entry point (HookRegistry records the plugin's name) ...
        assert set(hooks) == HOOK_TARGETS
        assert all(sources == [PLUGIN_NAME] for sources in hooks.values()), hooks
        # load_plugins() imports no sglang module the launcher (server_args imported first) did
        # not, with or without the plugin, and patches only what is imported.
        without = probe("SGLANG_PLUGINS")
        imported = [
            {m for m in s["imported_by_load"] if not m.startswith("sglang_specinit")}
            for s in (summary, without)
        ]
        assert imported[0] == imported[1]
        server_args_hooks = {t for t in HOOK_TARGETS if t.startswith("sglang.srt.server_args.")}
        assert server_args_hooks and server_args_hooks <= set(summary["patched_at_load"])
        worker_hooks = {t for t in HOOK_TARGETS if ".speculative." in t or ".managers." in t}
        assert not worker_hooks & set(summary["patched_at_load"])
        assert added_methods(summary, "new_methods_at_load") == []
    # ... and was applied, not only registered, next to another plugin's hooks too.
    missing = HOOK_TARGETS - set(summary["patched"])
    assert not missing, sorted(missing)
    # Every phase method is on its class, e.g. TpModelWorker.alloc_memory_pool.
    assert added_methods(summary) == sorted(f"{m}.{c}.{n}" for m, c, n in NEW_METHODS)
    assert (
        summary["new_methods"]["sglang.srt.managers.tp_worker.TpModelWorker.alloc_memory_pool"]
        == "sglang_specinit.sglang_0_5_13.tp_worker"
    )
    (active,) = [r for r in specinit_records(summary, "INFO") if "active on sglang" in r["message"]]
    assert summary["sglang_version"] in active["message"]
    assert specinit_records(summary, "WARNING") == []


# scenario -> what its one WARNING says (nothing: no warning)
PATCHES_NOTHING = {
    "SGLANG_SPECINIT_DISABLE": (),
    "SGLANG_PLUGINS": (),
    **{
        case: ("is OFF", "nothing will be phased", name)
        for case, (_, name) in BROKEN_SGLANG.items()
    },
    "sglang-0.5.12": ("is OFF", "0.5.12", "not one of the supported"),
}


@pytest.mark.parametrize("scenario", PATCHES_NOTHING)
def test_switched_off_broken_or_unsupported_sglang_patches_nothing(
    probe: Callable[[str], dict[str, Any]], scenario: str
) -> None:
    summary = probe(scenario)
    assert specinit_hooks(summary) == {}, specinit_hooks(summary)
    assert not set(summary["patched"]) & HOOK_TARGETS, summary["patched"]
    assert added_methods(summary) == []
    # The whitelist keeps SGLang from even importing the entry point.
    assert summary["specinit_imported"] is (scenario != "SGLANG_PLUGINS")
    warnings = [r["message"] for r in specinit_records(summary, "WARNING")]
    assert len(warnings) == bool(PATCHES_NOTHING[scenario]), warnings
    assert all(fragment in warnings[0] for fragment in PATCHES_NOTHING[scenario])


def test_a_module_changed_after_load_switches_phasing_off(
    probe: Callable[[str], dict[str, Any]],
) -> None:
    summary = probe("changed-later")
    (warning,) = specinit_records(summary, "WARNING")
    assert f"{CHANGED_LATER_MODULE}.DFlashWorker is missing" in warning["message"]
    assert not any(t.startswith(CHANGED_LATER_MODULE) for t in summary["patched"])
    assert not any(m.startswith(CHANGED_LATER_MODULE) for m in added_methods(summary))
    report = summary["extra"]
    assert any("DFlashWorker is missing" in p for p in report["problems"])
    assert report["blocker"] is not None and "is off" in report["blocker"]
    assert report["failures"] == []  # not STRICT: the import itself still works


@pytest.mark.parametrize(
    ("when", "missing"),
    [
        ("at-load", BROKEN_SGLANG["hooked-target-missing"][1]),
        ("after-load", f"{CHANGED_LATER_MODULE}.DFlashWorker"),
    ],
    ids=["at-load", "after-load"],
)
def test_strict_mode_stops_the_launch(probe: Callable[..., Any], when: str, missing: str) -> None:
    proc = probe(f"strict-{when}", to_end=False)
    assert proc.returncode != 0
    assert PROBE_MARK not in proc.stdout  # the probe never got to report
    assert "is OFF" in proc.stderr and missing in proc.stderr, proc.stderr[-2000:]


# lazy_import's contract (compat.install relies on it), on two stdlib modules nothing imports at
# start-up: a callback runs once, after its module's code; an import made inside a callback
# (as patching one module may import another) still goes through the finder.
_WATCHED = textwrap.dedent(
    """
    import json, sys
    from sglang_specinit.lazy_import import after_import

    fresh = "colorsys" not in sys.modules and "tabnanny" not in sys.modules
    calls = []

    def on_tabnanny(module):
        calls.append(("tabnanny", hasattr(module, "check")))

    def on_colorsys(module):
        calls.append(("colorsys", hasattr(module, "rgb_to_hsv")))
        import tabnanny  # an import made by a callback

    after_import("tabnanny", on_tabnanny)
    after_import("colorsys", on_colorsys)
    before = list(calls)
    import colorsys
    import colorsys  # already imported: nothing runs again
    print(sys.argv[-1] + json.dumps({"fresh": fresh, "before": before, "calls": calls}))
    """
)


def test_watched_modules_are_patched_once_after_their_import() -> None:
    result = plugin_probe.run_probe(sys.executable, _WATCHED, [], dict(os.environ), 120)
    assert result == {
        "fresh": True,
        "before": [],
        "calls": [["colorsys", True], ["tabnanny", True]],
    }, result
