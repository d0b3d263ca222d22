"""The plugin still patches a module that another plugin's hook made SGLang import early.

``HookRegistry.apply_hooks()`` imports the module of every registered target. When another
plugin (here: a hook on a ``ModelRunner`` method, as the GPU suite's device probe registers)
is applied while this plugin installs itself, ``model_runner`` is imported in the middle of
that installation; the plugin must patch it then rather than wait for an import that already
happened. Runs in a fresh interpreter, as SGLang's scheduler process does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_PROCESS = textwrap.dedent(
    """
    import json, sys
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    def passthrough(original, self, *args, **kwargs):
        return original(self, *args, **kwargs)

    HookRegistry.register(
        "sglang.srt.model_executor.model_runner.ModelRunner.init_cublas",
        passthrough,
        HookType.AROUND,
    )
    # As in SGLang's processes, some patched modules are imported before the plugin loads
    # (so it patches them at once, which applies every registered hook), model_runner is not.
    import sglang.srt.server_args

    before = "sglang.srt.model_executor.model_runner" in sys.modules
    from sglang.srt.plugins import load_plugins

    load_plugins()
    from sglang.srt.model_executor.model_runner import ModelRunner

    print(json.dumps({
        "imported_before_plugins": before,
        "alloc_memory_pool": hasattr(ModelRunner, "alloc_memory_pool"),
        "init_backends": hasattr(ModelRunner, "init_backends"),
    }))
    """
)


def test_module_imported_while_hooks_are_applied_is_patched() -> None:
    env = {
        **os.environ,
        "SGLANG_PLUGINS": "specinit",
        "PYTHONPATH": os.pathsep.join(
            [str(REPO / "python"), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    out = subprocess.run(
        [sys.executable, "-c", _PROCESS], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {
        "imported_before_plugins": False,
        "alloc_memory_pool": True,
        "init_backends": True,
    }, out.stderr[-3000:]
