"""The plugin still patches a module that another plugin's hook made SGLang import early."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

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
    import sglang_specinit
    from sglang_specinit.hooks import hook_registry_state

    print(json.dumps({
        "package": sglang_specinit.__file__,
        # Imported before the plugin loaded: patched by the plugin's install at once.
        "present_module_patched": "sglang.srt.server_args.ServerArgs._handle_gpu_memory_settings"
        in hook_registry_state().applied,
        "imported_before_plugins": before,
        "alloc_memory_pool": hasattr(ModelRunner, "alloc_memory_pool"),
        "init_backends": hasattr(ModelRunner, "init_backends"),
    }))
    """
)


def test_module_imported_while_hooks_are_applied_is_patched() -> None:
    import sglang_specinit

    env = {**os.environ, "SGLANG_PLUGINS": "specinit"}
    out = subprocess.run(
        [sys.executable, "-c", _PROCESS], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result.pop("package") == sglang_specinit.__file__
    assert result == {
        "present_module_patched": True,
        "imported_before_plugins": False,
        "alloc_memory_pool": True,
        "init_backends": True,
    }, out.stderr[-3000:]


# lazy_import's contract, in a fresh interpreter with two stdlib modules nothing imports at
# start-up: a watched module's callback runs once, after its code, on the import statement;
# a watched module imported from inside another callback (as patching one module would import
# another) still goes through the finder. compat.install relies on both: it watches every
# module not imported yet before it patches the ones that are.
_WATCHED = textwrap.dedent(
    """
    import json, sys
    from sglang_specinit.lazy_import import after_import

    fresh = "colorsys" not in sys.modules and "tabnanny" not in sys.modules
    calls = []

    def on_tabnanny(module):
        calls.append(("tabnanny", hasattr(module, "check")))

    def on_colorsys(module):
        calls.append(("colorsys", hasattr(module, "rgb_to_hsv")))
        import tabnanny  # an import made by a callback

    after_import("tabnanny", on_tabnanny)
    after_import("colorsys", on_colorsys)
    before = list(calls)
    import colorsys
    import colorsys  # already imported: nothing runs again
    print(json.dumps({"fresh": fresh, "before": before, "calls": calls}))
    """
)


def test_watched_modules_are_patched_once_after_their_import() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WATCHED], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {
        "fresh": True,
        "before": [],
        "calls": [["colorsys", True], ["tabnanny", True]],
    }, result
