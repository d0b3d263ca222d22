"""The 0.5.23 adapter's hook targets and required attributes match the installed 0.5.23.

The same check the plugin runs when SGLang imports each module (``hooks.module_problems``),
here on every module at once, so a changed signature fails CI rather than switching the
plugin off at a user's launch. Imports SGLang in the test process (``conftest.py`` puts the
``sgl_kernel`` test double on ``sys.path`` and selects SGLang's CPU engine first).
"""

from __future__ import annotations

import importlib


def test_every_patched_module_matches_the_adapter() -> None:
    from sglang_specinit import sglang_0_5_23
    from sglang_specinit.hooks import adapter_patches, module_problems

    problems = []
    for name, patch in adapter_patches(sglang_0_5_23).items():
        problems += module_problems(importlib.import_module(name), patch)
    assert problems == []
