"""Run a callback right after a named module, not imported yet, finishes importing, so a process
patches only the modules it uses: a meta-path finder wraps the real loader."""

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
    """Runs the callback once the module has executed; if it fails (a circular import may
    succeed later), the callback is watched again."""

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
    def __init__(self) -> None:
        self._callbacks: dict[str, Callback] = {}
        self._lock = threading.Lock()
        self._finding = threading.local()

    def watch(self, name: str, callback: Callback) -> None:
        with self._lock:
            self._callbacks[name] = callback

    def find_spec(
        self, fullname: str, path: Any, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        with self._lock:
            callback = self._callbacks.get(fullname)
        if callback is None or getattr(self._finding, "active", False):
            return None
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
    global _finder
    if _finder is None:
        _finder = AfterImportFinder()
        sys.meta_path.insert(0, _finder)
    _finder.watch(name, callback)
