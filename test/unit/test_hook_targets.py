"""``hooks.apply_hook_targets`` and ``harness.hook_state`` on SGLang's real ``HookRegistry``: own
targets applied once, another plugin's stay pending; the state names plugins and applied targets."""

from __future__ import annotations

import importlib
import sys
import types
from collections import defaultdict

import pytest
from harness.hook_state import hook_registry_state
from sglang.srt.plugins.hook_registry import HookRegistry, HookSource, HookType
from sglang_specinit.hooks import apply_hook_targets

OWN_MODULE = "specinit_test_hook_target"
OWN = f"{OWN_MODULE}.Worker.step"
# Another plugin's target, in an importable module nobody has imported yet.
LATER_MODULE = "specinit_test_not_yet_imported"
PENDING = f"{LATER_MODULE}.Worker.step"


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch, tmp_path) -> type[HookRegistry]:
    """The real HookRegistry emptied for the test, a fresh module, one importable but unimported."""
    worker = "class Worker:\n    def step(self, x):\n        return x\n"
    for name in (OWN_MODULE, LATER_MODULE):
        (tmp_path / f"{name}.py").write_text(worker)
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(HookRegistry, "_hooks", defaultdict(list))
    monkeypatch.setattr(HookRegistry, "_patched", set())
    monkeypatch.setitem(sys.modules, OWN_MODULE, importlib.import_module(OWN_MODULE))
    return HookRegistry


def plus_one(original, self, x: int) -> int:
    return original(self, x) + 1


def test_applies_only_the_given_targets_once_and_a_function_target_keeps_the_module_scan(
    registry: type[HookRegistry], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang.srt.plugins import hook_registry

    # HookRegistry's rebinding scan, counted (each call records the replaced object's name).
    scans: list[str] = []
    real = hook_registry._propagate_patch

    def spy(original, wrapped, owner):
        scans.append(original.__qualname__)
        return real(original, wrapped, owner)

    monkeypatch.setattr(hook_registry, "_propagate_patch", spy)
    registry.register(OWN, plus_one, HookType.AROUND)
    registry.register(PENDING, plus_one, HookType.AROUND)
    worker_cls = sys.modules[OWN_MODULE].Worker

    assert apply_hook_targets(registry, [OWN]) == [OWN]
    assert worker_cls().step(1) == 2
    # A method target is applied without the module scan, which is back for everyone else.
    assert scans == []
    assert hook_registry._propagate_patch is spy
    # Another plugin's target stays pending: not applied, its module never imported.
    state = hook_registry_state(registry)
    assert state.applied == {OWN}
    assert LATER_MODULE not in sys.modules
    assert PENDING in state.registered

    # A second call (the module's import hook firing again) does not wrap twice.
    assert apply_hook_targets(registry, [OWN]) == []
    assert worker_cls().step(1) == 2

    # A function target keeps the module scan: a ``from X import double`` copy is rebound too.
    module = sys.modules[OWN_MODULE]

    def double(x: int) -> int:
        return 2 * x

    module.double = double  # type: ignore[attr-defined]
    importer = types.ModuleType("specinit_test_importer")
    importer.double = double  # type: ignore[attr-defined]  # what ``from X import double`` leaves
    monkeypatch.setitem(sys.modules, importer.__name__, importer)

    def plus_one_fn(original, x: int) -> int:
        return original(x) + 1

    registry.register(f"{OWN_MODULE}.double", plus_one_fn, HookType.AROUND)
    apply_hook_targets(registry, [f"{OWN_MODULE}.double"])
    assert scans == [double.__qualname__]
    assert module.double(2) == 5
    assert importer.double(2) == 5


def test_state_names_each_hooks_plugin_and_the_applied_targets(
    registry: type[HookRegistry],
) -> None:
    registry.register(OWN, plus_one, HookType.AROUND, source=HookSource("specinit", "dist"))
    registry.register(OWN, plus_one, HookType.AROUND)
    registry.register(PENDING, plus_one, HookType.AROUND, source=HookSource("other", None))
    before = hook_registry_state(registry)
    assert before.registered == {OWN: ("specinit", None), PENDING: ("other",)}
    assert before.applied == frozenset()

    apply_hook_targets(registry, [OWN])
    after = hook_registry_state(registry)
    assert after.applied == {OWN}
    # A copy: later registrations do not change a state already read.
    registry.register(PENDING, plus_one, HookType.AROUND)
    assert after.registered[PENDING] == ("other",)
    # The default registry is SGLang's own.
    assert hook_registry_state().registered == hook_registry_state(HookRegistry).registered
