"""What SGLang's ``HookRegistry`` holds, read from its private state (it has no public read)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HookRegistryState:
    """Per registered target, each hook's plugin name (None outside a plugin); targets applied."""

    registered: dict[str, tuple[str | None, ...]]
    applied: frozenset[str]


def hook_registry_state(registry: Any = None) -> HookRegistryState:
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
