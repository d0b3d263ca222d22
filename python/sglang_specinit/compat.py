"""Which sglang release gets which adapter, and the per-process all-or-nothing check: a module
is patched when SGLang imports it, after a check; a failed check turns phasing off."""

from __future__ import annotations

import importlib
import logging
import pkgutil
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from types import ModuleType
from typing import Any

from sglang_specinit.generation import AdapterGeneration
from sglang_specinit.hooks import (
    ModulePatch,
    adapter_patches,
    apply_module_patch,
    module_problems,
)
from sglang_specinit.lazy_import import after_import

logger = logging.getLogger(__name__)

# An adapter package: ``sglang_`` and a release's digits.
_ADAPTER_NAME = re.compile(r"^sglang(_\d+)+$")


@cache
def generations() -> dict[str, AdapterGeneration]:
    """Adapter package -> its ``GENERATION``, oldest first."""
    import sglang_specinit

    names = [
        info.name
        for info in pkgutil.iter_modules(sglang_specinit.__path__)
        if info.ispkg and _ADAPTER_NAME.match(info.name)
    ]
    found = {name: load_adapter(name).GENERATION for name in names}
    return dict(sorted(found.items(), key=lambda item: release_key(item[1].releases[0]) or ()))


@dataclass(frozen=True)
class Decision:
    """What the plugin does on the installed sglang."""

    adapter: str | None
    sglang_version: str | None
    reason: str
    # A release the plugin does not serve: said at INFO, not WARNING.
    not_served: bool = False

    @property
    def generation(self) -> AdapterGeneration | None:
        return None if self.adapter is None else generations()[self.adapter]


def supported_releases() -> list[str]:
    return [release for generation in generations().values() for release in generation.releases]


_RELEASE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:\.?post(\d+))?")


def release_key(ver: str) -> tuple[int, int, int, int] | None:
    """``"1.2.3.post4"`` -> ``(1, 2, 3, 4)``, pre/dev suffixes ignored; None for a non-release."""
    match = _RELEASE.match(ver.strip())
    if match is None:
        return None
    major, minor, patch, post = match.groups()
    return (int(major), int(minor), int(patch or 0), int(post or 0))


def installed_sglang_version() -> str | None:
    """The installed sglang's version: ``sglang.version`` once sglang is imported, else package
    metadata (same answer). Every release label printed comes from here."""
    if "sglang" in sys.modules:
        try:
            from sglang.version import __version__

            return str(__version__)
        except ImportError:
            pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def decide_for_version(ver: str | None) -> Decision:
    """The adapter for ``ver``, or why there is none: an unserved release newer than the oldest
    served one is ``not_served`` (INFO, SGLang unchanged); older or unreadable ones unsupported."""
    if ver is None:
        return Decision(None, None, "sglang is not installed")
    for adapter, generation in generations().items():
        if ver in generation.releases:
            return Decision(adapter, ver, "supported")
    supported = ", ".join(supported_releases())
    key = release_key(ver)
    served_keys = [release_key(r) for r in supported_releases()]
    oldest = min(k for k in served_keys if k is not None)
    if key is not None and key > oldest:
        phases_its_init = [
            release_key(generation.releases[0]) or oldest
            for generation in generations().values()
            if generation.sglang_phases_init
        ]
        unchanged = (
            "SGLang's own phased init runs unchanged"
            if phases_its_init and key >= min(phases_its_init)
            else "SGLang starts stock, draft memory outside the budget"
        )
        return Decision(
            None,
            ver,
            f"sglang {ver} is not a release sglang-specinit serves (supported: {supported}); "
            + unchanged,
            not_served=True,
        )
    if key is not None:
        first = min(supported_releases(), key=lambda r: release_key(r) or oldest)
        return Decision(
            None,
            ver,
            f"sglang {ver} is not one of the supported {supported}: it is older than "
            f"{first}, the oldest release whose init and pool code an adapter replays "
            "(docs/releases.md names what differs)",
        )
    return Decision(None, ver, f"sglang {ver} is not one of the supported {supported}")


def load_adapter(name: str) -> Any:
    return importlib.import_module(f"sglang_specinit.{name}")


class CompatError(RuntimeError):
    """A module SGLang imported differs from what the adapter was written for."""


@dataclass
class PatchState:
    """Per process: which SGLang modules were checked and patched, and what failed."""

    version: str
    patches: dict[str, ModulePatch]
    source: Any = None
    strict: bool = False
    patched: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def off_message(self) -> str:
        return (
            f"sglang-specinit is OFF on sglang {self.version}: nothing will be phased and "
            "speculative draft memory stays unbudgeted: " + "; ".join(self.problems)
        )

    def check_and_apply(self, modules: Iterable[ModuleType]) -> bool:
        """Check every module first; patch them all only if every check passes."""
        modules = list(modules)
        if self.problems:
            return False
        found = [p for m in modules for p in module_problems(m, self.patches[m.__name__])]
        if found:
            self.problems.extend(found)
            if self.strict:
                raise CompatError(self.off_message())
            logger.warning(self.off_message())
            return False
        for module in modules:
            apply_module_patch(self.patches[module.__name__], module, self.source)
            self.patched.append(module.__name__)
        return True


_state: PatchState | None = None


def install(version: str, patches: dict[str, ModulePatch], source: Any, strict: bool) -> PatchState:
    """Check and patch (all or none) the modules SGLang has imported; watch the others."""
    global _state
    state = PatchState(version=version, patches=patches, source=source, strict=strict)
    _state = state
    present = [name for name in patches if name in sys.modules]
    # Watch first, so a module that patching imported would still be checked.
    for name in patches:
        if name not in present:
            after_import(name, lambda module: state.check_and_apply([module]))
    state.check_and_apply([sys.modules[name] for name in present])
    return state


def state() -> PatchState | None:
    return _state


def problems_so_far() -> list[str]:
    """Why this process must not phase, as far as the modules imported so far tell."""
    return problems_for(())


def problems_for(module_names: Iterable[str]) -> list[str]:
    """Import (as SGLang is about to) and check ``module_names``; why phasing must not run."""
    if _state is None:
        return ["sglang-specinit is not active in this process"]
    for name in module_names:
        if name in _state.patches:
            importlib.import_module(name)
    return list(_state.problems)


def launch_problems(scheduler: Any, adapter: ModuleType, release: str | None = None) -> list[str]:
    """:func:`problems_for` every module ``adapter`` patches that this launch runs: speculative
    workers only from the class hierarchy of ``scheduler.draft_worker`` and its ``draft_worker``."""
    workers = [scheduler.draft_worker, getattr(scheduler.draft_worker, "draft_worker", None)]
    own = {cls.__module__ for w in workers if w is not None for cls in type(w).__mro__}
    return problems_for(
        name
        for name in adapter_patches(adapter, release)
        if not name.startswith("sglang.srt.speculative.") or name in own
    )
