"""Declare a phase module's patch next to the functions it installs (a recording decorator);
``patch.tables()`` gives ``HOOKS, NEW_METHODS, REQUIRES``. It fails at import when a hook's
``params`` are not what the function takes or a target is declared twice."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from sglang_specinit.hooks import Hook, NewMethod, Requires

F = TypeVar("F", bound=Callable[..., Any])

# Arguments a hook function takes before the hooked method's own, per HookRegistry kind.
_LEADING = {"AROUND": ("original", "self"), "BEFORE": ("self",), "AFTER": ("result", "self")}


class PatchTable:
    def __init__(self, module: str) -> None:
        self.module = module
        self._hooks: list[Hook] = []
        self._new_methods: list[NewMethod] = []
        self._requires: list[Requires] = []

    def around(
        self, qualname: str, *, params: tuple[str, ...] | None = None, module: str | None = None
    ) -> Callable[[F], F]:
        return self._hook("AROUND", qualname, params, module)

    def before(
        self, qualname: str, *, params: tuple[str, ...] | None = None, module: str | None = None
    ) -> Callable[[F], F]:
        return self._hook("BEFORE", qualname, params, module)

    def adds(
        self, class_name: str, name: str | None = None, *, module: str | None = None
    ) -> Callable[[F], F]:
        """The class must not define ``name`` already."""

        def record(fn: F) -> F:
            entry = NewMethod(module or self.module, class_name, name or fn.__name__, fn)
            self._once(entry.target, [m.target for m in self._new_methods])
            self._new_methods.append(entry)
            return fn

        return record

    def calls(self, *qualnames: str, module: str | None = None) -> Callable[[F], F]:
        """The function, or what it drives, calls these SGLang attributes."""

        def record(fn: F) -> F:
            self.requires(*qualnames, module=module)
            return fn

        return record

    def requires(self, *qualnames: str, module: str | None = None) -> None:
        for qualname in qualnames:
            entry = Requires(module or self.module, qualname)
            self._once(entry.target, [r.target for r in self._requires])
            self._requires.append(entry)

    def tables(self) -> tuple[tuple[Hook, ...], tuple[NewMethod, ...], tuple[Requires, ...]]:
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
