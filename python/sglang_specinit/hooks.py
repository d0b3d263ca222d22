"""What a release adapter patches, as plain data, and how one SGLang module gets patched.

Every release package (``sglang_0_5_13``, ...) describes its patch as tables of three kinds of
entries, one table per phase module:

    Hook        a HookRegistry hook on one SGLang function or method
    NewMethod   a method the plugin adds to an SGLang class (it must not exist yet)
    Requires    an SGLang attribute the phases call (it must exist)

An adapter package's ``__init__`` declares only its ``GENERATION`` (releases, phase modules);
:func:`adapter_patches` and :func:`adapter_new_methods` read the tables of those modules.
Entries name their SGLang module explicitly, so the plugin can check and patch each module on
its own, at the moment SGLang imports it (:mod:`sglang_specinit.lazy_import`), instead of
importing every module it might ever patch when the plugin loads.
"""

from __future__ import annotations

import inspect
import pkgutil
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Hook:
    """A HookRegistry hook on ``module.qualname``."""

    module: str
    qualname: str
    fn: Callable[..., Any]
    kind: str = "AROUND"  # a HookType name
    # Parameter names after ``self`` the hook relies on (a prefix of the real signature).
    params: tuple[str, ...] | None = None

    @property
    def target(self) -> str:
        return f"{self.module}.{self.qualname}"


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
class Requires:
    """``module.qualname`` must exist (the phases call it)."""

    module: str
    qualname: str

    @property
    def target(self) -> str:
        return f"{self.module}.{self.qualname}"


@dataclass(frozen=True)
class ModulePatch:
    """Everything a release adapter does to one SGLang module."""

    module: str
    hooks: tuple[Hook, ...] = ()
    new_methods: tuple[NewMethod, ...] = ()
    requires: tuple[Requires, ...] = ()


def group_by_module(
    hooks: Iterable[Hook], new_methods: Iterable[NewMethod], requires: Iterable[Requires]
) -> dict[str, ModulePatch]:
    """The adapter's tables, regrouped per SGLang module."""
    grouped: dict[str, dict[str, list[Any]]] = {}
    for kind, entries in (("hooks", hooks), ("new_methods", new_methods), ("requires", requires)):
        for entry in entries:
            grouped.setdefault(entry.module, {"hooks": [], "new_methods": [], "requires": []})
            grouped[entry.module][kind].append(entry)
    return {
        module: ModulePatch(
            module=module,
            hooks=tuple(parts["hooks"]),
            new_methods=tuple(parts["new_methods"]),
            requires=tuple(parts["requires"]),
        )
        for module, parts in grouped.items()
    }


def _generation(adapter: Any) -> Any:
    """The :class:`~sglang_specinit.generation.Generation` of an adapter package (or itself)."""
    return getattr(adapter, "GENERATION", adapter)


def phase_modules(adapter: Any) -> list[ModuleType]:
    """An adapter's phase modules, imported (none of them imports SGLang at import time)."""
    generation = _generation(adapter)
    return [generation.module(name) for name in generation.phase_modules]


def adapter_patches(adapter: Any, release: str | None = None) -> dict[str, ModulePatch]:
    """Every SGLang module an adapter checks or patches, per SGLang module: its phase modules'
    ``HOOKS``, ``NEW_METHODS`` and ``REQUIRES``; with ``release``, also what the adapter reads
    in that release's own form."""
    modules = phase_modules(adapter)
    extra = _generation(adapter).release_requires(release) if release is not None else ()
    return group_by_module(
        (hook for m in modules for hook in m.HOOKS),
        (method for m in modules for method in m.NEW_METHODS),
        [*(required for m in modules for required in m.REQUIRES), *extra],
    )


def adapter_new_methods(adapter: Any) -> list[Callable[..., Any]]:
    """The functions an adapter's phase modules add to SGLang classes (a worker that
    inherits one is not phase-ready by itself)."""
    return [method.fn for m in phase_modules(adapter) for method in m.NEW_METHODS]


def is_instance_of(obj: Any, module: str, class_name: str) -> bool:
    """``isinstance`` without importing ``module``: if SGLang has not imported it, ``obj``
    cannot be an instance of its class (and importing it would patch it for nothing)."""
    import sys

    cls = getattr(sys.modules.get(module), class_name, None)
    return cls is not None and isinstance(obj, cls)


def _lookup(module: ModuleType, qualname: str) -> Any:
    value: Any = module
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


def module_problems(module: ModuleType, patch: ModulePatch) -> list[str]:
    """What in ``module`` differs from what ``patch`` was written against (empty: all fine)."""
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
    """Register ``patch``'s hooks with SGLang's HookRegistry, apply them, add the methods.

    The module is already imported (SGLang imported it), so HookRegistry resolves the targets
    without importing anything new. ``source`` is the ``HookSource`` SGLang set while it ran
    the plugin's entry point; hooks applied later still name the plugin they came from.
    """
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for hook in patch.hooks:
        HookRegistry.register(hook.target, hook.fn, HookType[hook.kind], source=source)
    apply_hook_targets(HookRegistry, [hook.target for hook in patch.hooks])
    for method in patch.new_methods:
        setattr(_lookup(module, method.class_name), method.name, method.fn)


def apply_hook_targets(registry: Any, targets: Iterable[str]) -> list[str]:
    """Apply these targets' registered hooks, each once, as ``HookRegistry.apply_hooks`` applies
    one target; returns the targets applied now (a target already applied is skipped).

    ``apply_hooks`` would also retry every other plugin's still-pending target, and this runs
    while SGLang is importing modules (a pending target may sit in a module only half
    imported), so only the plugin's own targets are applied here. HookRegistry has no public
    per-target call, so this and :func:`hook_registry_state` are the only places that read its
    private state: ``_hooks`` (target -> registered hooks), ``_patched`` (targets applied) and
    ``_apply_target`` (applies one target), all as in sglang 0.5.13.post1 to 0.5.23
    (``srt/plugins/hook_registry.py``). Without ``_apply_target`` (no release served here),
    ``apply_hooks`` is the fallback.
    """
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


# HookRegistry's pass over every loaded module after it replaced a target (its module's
# global, as in sglang 0.5.13.post1 to 0.5.23): ``_propagate_patch(original, wrapped, owner)``.
REBINDING_SCAN = "_propagate_patch"


def _no_stale_copies(original: Any, wrapped: Any, owner: Any) -> int:
    return 0


@contextmanager
def rebinding_scan_skipped_for_method(registry: Any, target: str) -> Iterator[None]:
    """While ``target`` is applied, skip HookRegistry's rebinding scan if ``target`` is a method.

    After replacing a target, ``_apply_target`` rebinds every stale ``from X import name`` copy
    of the original by walking every attribute of every module in ``sys.modules``: about 6000
    modules once a scheduler has imported SGLang, some 20 ms of CPU per target in each SGLang
    process (``benchmark/bench_plugin_load.py``). A function defined in a class body has no
    such copy (modules reach it through its class, whose attribute is the one replaced), so for
    a method the scan finds nothing (``test/sglang_0_5_23/test_adapter_signatures.py`` checks
    that no 0.5.23 module holds a copy of one of the adapter's hooked methods). A target whose
    owner is a module (a function, a class) keeps the scan, and so does a registry without it.
    """
    module = sys.modules.get(getattr(registry, "__module__", ""))
    scan = getattr(module, REBINDING_SCAN, None)
    try:
        # _apply_target resolves the same path right after: this imports nothing it would not.
        owner = pkgutil.resolve_name(target.rpartition(".")[0])
    except (ImportError, AttributeError, ValueError):
        owner = None  # _apply_target raises its own error
    if scan is None or not isinstance(owner, type):
        yield
        return
    setattr(module, REBINDING_SCAN, _no_stale_copies)
    try:
        yield
    finally:
        setattr(module, REBINDING_SCAN, scan)


@dataclass(frozen=True)
class HookRegistryState:
    """What SGLang's HookRegistry holds: per registered target, the plugin name of each hook's
    source (None for a hook registered outside a plugin), and the targets applied so far."""

    registered: dict[str, tuple[str | None, ...]]
    applied: frozenset[str]


def hook_registry_state(registry: Any = None) -> HookRegistryState:
    """A copy of what ``registry`` (default: SGLang's ``HookRegistry``) has registered and
    applied, for reports and tests; it has no public read of either, so this reads ``_hooks``
    and ``_patched`` as :func:`apply_hook_targets` does."""
    if registry is None:
        from sglang.srt.plugins.hook_registry import HookRegistry

        registry = HookRegistry
    return HookRegistryState(
        registered={
            target: tuple(getattr(source, "plugin_name", None) for _, _, source in hooks)
            for target, hooks in registry._hooks.items()
        },
        applied=frozenset(registry._patched),
    )
