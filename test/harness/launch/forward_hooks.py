"""A ``--forward-hooks`` factory for launches that check SGLang registers the hooks it is given.

SGLang resolves ``hook_factory`` by import path in each scheduler process (``test/`` is on its
``PYTHONPATH`` through the harness's sitecustomize) and attaches what it returns to every module
matching ``target_modules``; the scheduler report lists the hooked modules per runner."""

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
