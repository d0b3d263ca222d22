"""What a release adapter patches, as plain data (``HOOKS``, ``NEW_METHODS``, ``REQUIRES`` per
phase module), and how one SGLang module gets patched when SGLang imports it."""

from __future__ import annotations

import inspect
import pkgutil
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Requires:
    module: str
    qualname: str

    @property
    def target(self) -> str:
        return f"{self.module}.{self.qualname}"


@dataclass(frozen=True)
class Hook(Requires):
    fn: Callable[..., Any]
    kind: str = "AROUND"  # a HookType name
    # Parameter names after ``self`` the hook relies on (a prefix of the real signature).
    params: tuple[str, ...] | None = None


@dataclass(frozen=True)
class NewMethod:
    """``module.class_name.name = fn``; the class must not define ``name`` already."""

    module: str
    class_name: str
    name: str
    fn: Callable[..., Any]

    @property
    def target(self) -> str:
        return f"{self.module}.{self.class_name}.{self.name}"


@dataclass(frozen=True)
class ModulePatch:
    module: str
    hooks: tuple[Hook, ...] = ()
    new_methods: tuple[NewMethod, ...] = ()
    requires: tuple[Requires, ...] = ()


def group_by_module(
    hooks: Iterable[Hook], new_methods: Iterable[NewMethod], requires: Iterable[Requires]
) -> dict[str, ModulePatch]:
    grouped: dict[str, ModulePatch] = {}
    for kind, entries in (("hooks", hooks), ("new_methods", new_methods), ("requires", requires)):
        for entry in entries:
            patch = grouped.setdefault(entry.module, ModulePatch(entry.module))
            grouped[entry.module] = replace(patch, **{kind: (*getattr(patch, kind), entry)})
    return grouped


def _generation(adapter: Any) -> Any:
    return getattr(adapter, "GENERATION", adapter)


def phase_modules(adapter: Any) -> list[ModuleType]:
    generation = _generation(adapter)
    return [generation.module(name) for name in generation.phase_modules]


def adapter_patches(adapter: Any, release: str | None = None) -> dict[str, ModulePatch]:
    """The adapter's tables per SGLang module; with ``release``, also the attributes that release
    requires in its own form."""
    modules = phase_modules(adapter)
    extra = _generation(adapter).release_requires(release) if release is not None else ()
    return group_by_module(
        (hook for m in modules for hook in m.HOOKS),
        (method for m in modules for method in m.NEW_METHODS),
        [*(required for m in modules for required in m.REQUIRES), *extra],
    )


def adapter_new_methods(adapter: Any) -> list[Callable[..., Any]]:
    return [method.fn for m in phase_modules(adapter) for method in m.NEW_METHODS]


def is_instance_of(obj: Any, module: str, class_name: str) -> bool:
    """``isinstance`` without importing ``module`` (importing it would patch it for nothing)."""
    cls = getattr(sys.modules.get(module), class_name, None)
    return cls is not None and isinstance(obj, cls)


def _lookup(module: ModuleType, qualname: str) -> Any:
    value: Any = module
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


def module_problems(module: ModuleType, patch: ModulePatch) -> list[str]:
    problems = []
    for hook in patch.hooks:
        try:
            fn = _lookup(module, hook.qualname)
        except AttributeError as exc:
            problems.append(f"{hook.target} is missing ({exc})")
            continue
        if hook.params is None:
            continue
        names = tuple(inspect.signature(fn).parameters)[1:]
        if names[: len(hook.params)] != hook.params:
            problems.append(f"{hook.target}{names} does not take {hook.params}")
    for required in patch.requires:
        try:
            _lookup(module, required.qualname)
        except AttributeError:
            problems.append(f"{required.target} is missing")
    for method in patch.new_methods:
        try:
            cls = _lookup(module, method.class_name)
        except AttributeError:
            problems.append(f"{method.module}.{method.class_name} is missing")
            continue
        if method.name in vars(cls):
            problems.append(f"{method.target} already exists")
    return problems


def apply_module_patch(patch: ModulePatch, module: ModuleType, source: Any = None) -> None:
    """Register and apply ``patch``'s hooks, add its methods. ``source`` is the ``HookSource``
    SGLang set while running the entry point, so late hooks still name this plugin."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for hook in patch.hooks:
        HookRegistry.register(hook.target, hook.fn, HookType[hook.kind], source=source)
    apply_hook_targets(HookRegistry, [hook.target for hook in patch.hooks])
    for method in patch.new_methods:
        setattr(_lookup(module, method.class_name), method.name, method.fn)


def apply_hook_targets(registry: Any, targets: Iterable[str]) -> list[str]:
    """Apply only these targets, each once (``apply_hooks`` would retry other plugins' targets,
    maybe in a module half imported); returns those applied now."""
    pending = [target for target in targets if target not in registry._patched]
    apply_target = getattr(registry, "_apply_target", None)
    if apply_target is None:
        registry.apply_hooks()
        return [target for target in pending if target in registry._patched]
    for target in pending:
        with rebinding_scan_skipped_for_method(registry, target):
            apply_target(target, registry._hooks[target])
        registry._patched.add(target)
    return pending


# HookRegistry's pass over every loaded module after it replaced a target.
REBINDING_SCAN = "_propagate_patch"


@contextmanager
def rebinding_scan_skipped_for_method(registry: Any, target: str) -> Iterator[None]:
    """Skip the rebinding scan (~20 ms per target over ~6000 modules) for a method: no module
    holds a ``from X import`` copy of a method, so the scan would find nothing."""
    module = sys.modules.get(getattr(registry, "__module__", ""))
    scan = getattr(module, REBINDING_SCAN, None)
    try:
        owner = pkgutil.resolve_name(target.rpartition(".")[0])
    except (ImportError, AttributeError, ValueError):
        owner = None  # _apply_target raises its own error
    if scan is None or not isinstance(owner, type):
        yield
        return
    setattr(module, REBINDING_SCAN, lambda original, wrapped, owner: 0)
    try:
        yield
    finally:
        setattr(module, REBINDING_SCAN, scan)
