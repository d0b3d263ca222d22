"""A ``--forward-hooks`` factory (each scheduler imports it: ``test/`` is on its path) for launches
that check SGLang registers the hooks it is given (the scheduler report lists them per runner)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FACTORY = "harness.launch.forward_hooks:passthrough_hook"


def passthrough_hook(config: dict[str, Any]) -> Callable[..., None]:
    """A hook that leaves the module's output as it is (returns None)."""

    def hook(module: Any, inputs: Any, output: Any) -> None:
        return None

    return hook


def hook_specs(target_modules: list[str]) -> list[dict[str, Any]]:
    """One ``--forward-hooks`` entry hooking ``target_modules`` (SGLang's glob patterns)."""
    return [{"name": "specinit-test", "target_modules": target_modules, "hook_factory": FACTORY}]
