"""One SGLang API generation, the object each adapter package exports: the core reaches
release-specific code only through it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from sglang_specinit.hooks import Requires


@dataclass(frozen=True)
class AdapterGeneration:
    """All the core may call on an adapter, declared as data by its package's ``__init__``."""

    package: str
    releases: tuple[str, ...]
    phase_modules: tuple[str, ...]
    # True where the release's own init already loads both models before sizing the pools.
    sglang_phases_init: bool
    # Per-release requirements beyond the phase tables (a generation spanning API changes).
    requires_by_release: Callable[[str | None], tuple[Requires, ...]] | None = None
    # The releases whose planner replay prices DeepSeek-V4.
    deepseek_v4_releases: tuple[str, ...] = ()

    def release_requires(self, release: str | None = None) -> tuple[Requires, ...]:
        if self.requires_by_release is None:
            return ()
        return tuple(self.requires_by_release(release))

    def module(self, name: str) -> ModuleType:
        """``name`` in the adapter package, or a core module by its dotted path."""
        return importlib.import_module(name if "." in name else f"{self.package}.{name}")

    def replay(self) -> Any:
        return self.module("planner_replay").REPLAY
