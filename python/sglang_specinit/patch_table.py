"""Declare a phase module's patch next to the functions it installs (a recording decorator).

A phase module's ``HOOKS`` / ``NEW_METHODS`` / ``REQUIRES`` tables (:mod:`sglang_specinit.hooks`)
can be written where the functions are::

    patch = PatchTable("sglang.srt.managers.scheduler")

    @patch.around("Scheduler.init_memory_pools", params=())
    @patch.calls("Scheduler.init_target_memory_pool")
    def init_memory_pools(original, self): ...

    HOOKS, NEW_METHODS, REQUIRES = patch.tables()

The decorators only record (the function is returned unchanged) and check the declaration
against the function when the module is imported, failing loudly as pluggy's hook
verification does: a hook's ``params`` must be what the function takes after ``original`` /
``self``, and no target is declared twice. The plugin then checks and applies the tables
exactly as it does hand-written ones (:func:`hooks.adapter_patches`, :mod:`compat`).
Stacked decorators record bottom-up, as Python applies them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from sglang_specinit.hooks import Hook, NewMethod, Requires

F = TypeVar("F", bound=Callable[..., Any])

# Arguments a hook function takes before the hooked method's own, per HookRegistry kind.
_LEADING = {"AROUND": ("original", "self"), "BEFORE": ("self",), "AFTER": ("result", "self")}


class PatchTable:
    """The hooks, added methods and required attributes one phase module declares.

    ``module`` is the SGLang module entries target unless an entry names another one.
    """

    def __init__(self, module: str) -> None:
        self.module = module
        self._hooks: list[Hook] = []
        self._new_methods: list[NewMethod] = []
        self._requires: list[Requires] = []

    def around(
        self, qualname: str, *, params: tuple[str, ...] | None = None, module: str | None = None
    ) -> Callable[[F], F]:
        """``fn(original, self, *params, ...)`` wraps ``module.qualname`` (HookType.AROUND)."""
        return self._hook("AROUND", qualname, params, module)

    def before(
        self, qualname: str, *, params: tuple[str, ...] | None = None, module: str | None = None
    ) -> Callable[[F], F]:
        """``fn(self, *params, ...)`` runs before ``module.qualname`` (HookType.BEFORE)."""
        return self._hook("BEFORE", qualname, params, module)

    def adds(
        self, class_name: str, name: str | None = None, *, module: str | None = None
    ) -> Callable[[F], F]:
        """The function becomes ``class_name.name`` (default: its own name); the class must
        not define it already."""

        def record(fn: F) -> F:
            entry = NewMethod(module or self.module, class_name, name or fn.__name__, fn)
            self._once(entry.target, [m.target for m in self._new_methods])
            self._new_methods.append(entry)
            return fn

        return record

    def calls(self, *qualnames: str, module: str | None = None) -> Callable[[F], F]:
        """The function (or what it drives) calls these SGLang attributes: they must exist."""

        def record(fn: F) -> F:
            self.requires(*qualnames, module=module)
            return fn

        return record

    def requires(self, *qualnames: str, module: str | None = None) -> None:
        """Attributes the phases call, declared where no single function owns them."""
        for qualname in qualnames:
            entry = Requires(module or self.module, qualname)
            self._once(entry.target, [r.target for r in self._requires])
            self._requires.append(entry)

    def tables(self) -> tuple[tuple[Hook, ...], tuple[NewMethod, ...], tuple[Requires, ...]]:
        """``HOOKS, NEW_METHODS, REQUIRES`` in the order they were declared."""
        return tuple(self._hooks), tuple(self._new_methods), tuple(self._requires)

    def _hook(
        self, kind: str, qualname: str, params: tuple[str, ...] | None, module: str | None
    ) -> Callable[[F], F]:
        def record(fn: F) -> F:
            entry = Hook(module or self.module, qualname, fn, kind=kind, params=params)
            self._once(entry.target, [h.target for h in self._hooks])
            if params is not None:
                _check_params(fn, kind, params, entry.target)
            self._hooks.append(entry)
            return fn

        return record

    @staticmethod
    def _once(target: str, declared: list[str]) -> None:
        if target in declared:
            raise ValueError(f"{target} is declared twice in one patch table")


def _check_params(fn: Callable[..., Any], kind: str, params: tuple[str, ...], target: str) -> None:
    """The hook function must take ``params`` right after its leading arguments (or *args)."""
    sig = list(inspect.signature(fn).parameters.values())
    rest = sig[len(_LEADING[kind]) :]
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in rest):
        return
    names = tuple(p.name for p in rest if p.kind is not inspect.Parameter.KEYWORD_ONLY)
    if names[: len(params)] != params:
        raise TypeError(
            f"{fn.__module__}.{fn.__qualname__} hooks {target} with params {params} but takes "
            f"{names} after {_LEADING[kind]}"
        )
