"""Install the harness's hooks in every Python process of a test run."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from pathlib import Path

_TRIGGER = "sglang.srt.plugins.hook_registry"
_TEST_DIR = str(Path(__file__).resolve().parents[3])


def _register(plugin_name: str, hooks: list) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookSource, HookType

    source = HookSource(plugin_name=plugin_name, dist_name=None)
    for target, hook, kind in hooks:
        HookRegistry.register(target, hook, HookType[kind], source=source)


def _register_test_hooks() -> None:
    if os.environ.get("SPECINIT_TEST_SHIMS") == "1":
        from harness.cpu_doubles import faults, shims

        _register("specinit-test-shims", shims.shim_hooks())
        # Only the fault doubles whose environment variable is set.
        _register("specinit-test-faults", faults.fault_hooks())
        if os.environ.get("SPECINIT_TEST_REPORT_DIR"):
            from harness.reports import scheduler_report

            _register("specinit-test-report", scheduler_report.report_hooks())
    if os.environ.get("SPECINIT_TEST_DEVICE_PROBE") == "1":
        from harness.reports import device_probe

        _register("specinit-test-device-probe", device_probe.probe_hooks())
    if os.environ.get("SPECINIT_TEST_STORAGE_IDENTITY") == "1":
        from harness.gpu import storage_identity

        storage_identity.register_identity_hooks()


class _RegisterAfterHookRegistryImport(importlib.abc.MetaPathFinder):
    """Meta-path finder that fires once, when ``hook_registry`` is first imported."""

    def find_spec(
        self, fullname: str, path: object, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _TRIGGER:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run_module_body = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run_module_body(module)
            _register_test_hooks()

        spec.loader.exec_module = exec_module
        return spec


_SWITCHES = ("SPECINIT_TEST_SHIMS", "SPECINIT_TEST_DEVICE_PROBE", "SPECINIT_TEST_STORAGE_IDENTITY")
if "1" in (os.environ.get(name) for name in _SWITCHES):
    # test/ holds the ``harness`` package (the engine driver and the unpickled
    # ``custom_sigquit_handler`` live there). Appended, so it never shadows a real module.
    if _TEST_DIR not in sys.path:
        sys.path.append(_TEST_DIR)
    if _TRIGGER in sys.modules:  # pragma: no cover - only if something imported it first
        _register_test_hooks()
    else:
        sys.meta_path.insert(0, _RegisterAfterHookRegistryImport())
