"""The 0.5.23 adapter's hook targets and required attributes match the installed 0.5.23.

The same check the plugin runs when SGLang imports each module (``hooks.module_problems``),
here on every module at once, so a changed signature fails CI rather than switching the
plugin off at a user's launch. Also what lets ``hooks.apply_hook_targets`` skip HookRegistry's
module-wide rebinding scan for these targets: no module holds a copy of a hooked method.
Imports SGLang in the test process (``conftest.py`` puts the ``sgl_kernel`` test double on
``sys.path`` and selects SGLang's CPU engine first).
"""

from __future__ import annotations

import importlib
import sys


def test_every_patched_module_matches_the_adapter() -> None:
    from sglang_specinit import sglang_0_5_23
    from sglang_specinit.hooks import adapter_patches, module_problems

    problems = []
    for name, patch in adapter_patches(sglang_0_5_23).items():
        problems += module_problems(importlib.import_module(name), patch)
    assert problems == []


def test_no_module_holds_a_copy_of_a_hooked_method() -> None:
    """``hooks.rebinding_scan_skipped_for_method`` skips HookRegistry's scan for method
    targets because it would find nothing: here every module SGLang has imported by now is
    scanned for the original of each hooked method, as that scan would."""
    from sglang_specinit import sglang_0_5_23
    from sglang_specinit.hooks import adapter_patches

    copies = []
    for name, patch in adapter_patches(sglang_0_5_23).items():
        module = importlib.import_module(name)
        for hook in patch.hooks:
            owner_path, _, attr = hook.qualname.rpartition(".")
            owner = module
            for part in owner_path.split("."):
                owner = getattr(owner, part)
            assert isinstance(owner, type), f"{hook.target} is not a method"
            original = vars(owner)[attr]
            original = getattr(original, "__func__", original)  # classmethod, staticmethod
            copies += [
                f"{hook.target} as {other.__name__}.{key}"
                for other in list(sys.modules.values())
                if other is not None and other is not module and hasattr(other, "__dict__")
                for key, value in list(vars(other).items())
                if value is original
            ]
    assert copies == []
