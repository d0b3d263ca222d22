"""Run a callback right after a named module, not imported yet, finishes importing.

The plugin patches a module only once SGLang itself imports it, so a process pays only for the
modules it really uses: the launcher never imports the speculative workers, and a scheduler
imports only the worker of its own algorithm. A meta-path finder sees the import, lets the
regular finders locate the module, and wraps the loader so the callback runs after the module's
code has executed and before the importing statement continues.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

Callback = Callable[[ModuleType], None]


class _LoaderAfterExec(importlib.abc.Loader):
    """Delegates to the real loader; runs the callback once the module has executed.

    If the module's own code fails (an import attempted in the middle of another module's
    import can fail on a circular import and succeed later), the callback goes back on the
    watch list, so the import that finally succeeds still runs it.
    """

    def __init__(self, loader: Any, callback: Callback, rewatch: Callable[[], None]) -> None:
        self._loader = loader
        self._callback = callback
        self._rewatch = rewatch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        try:
            self._loader.exec_module(module)
        except BaseException:
            self._rewatch()
            raise
        self._callback(module)

    def __getattr__(self, name: str) -> Any:
        # get_source, get_code, is_package, get_filename ...: inspect and linecache use them.
        return getattr(self._loader, name)


class AfterImportFinder(importlib.abc.MetaPathFinder):
    """Calls ``callbacks[name](module)`` once, after module ``name`` is imported."""

    def __init__(self) -> None:
        self._callbacks: dict[str, Callback] = {}
        self._lock = threading.Lock()
        self._finding = threading.local()

    def watch(self, name: str, callback: Callback) -> None:
        """Call ``callback`` after ``name`` is imported (the caller patches the modules already
        imported itself: :func:`sglang_specinit.compat.install`)."""
        with self._lock:
            self._callbacks[name] = callback

    def watched(self) -> list[str]:
        with self._lock:
            return sorted(self._callbacks)

    def find_spec(
        self, fullname: str, path: Any, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        with self._lock:
            callback = self._callbacks.get(fullname)
        if callback is None or getattr(self._finding, "active", False):
            return None
        # Let the other finders locate the module (this finder skips itself meanwhile).
        self._finding.active = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._finding.active = False
        if spec is None or spec.loader is None:
            return None
        with self._lock:
            self._callbacks.pop(fullname, None)
        spec.loader = _LoaderAfterExec(
            spec.loader, callback, rewatch=lambda: self._rewatch(fullname, callback)
        )
        return spec

    def _rewatch(self, name: str, callback: Callback) -> None:
        with self._lock:
            self._callbacks.setdefault(name, callback)


_finder: AfterImportFinder | None = None


def after_import(name: str, callback: Callback) -> None:
    """Run ``callback(module)`` once module ``name``, not in ``sys.modules`` yet, is imported."""
    global _finder
    if _finder is None:
        _finder = AfterImportFinder()
        sys.meta_path.insert(0, _finder)
    _finder.watch(name, callback)
