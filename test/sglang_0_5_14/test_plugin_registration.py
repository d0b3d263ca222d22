"""The real entry point on 0.5.14 / 0.5.15 applies exactly the ``sglang_0_5_14`` adapter's hooks
(none of 0.5.13's nor 0.5.23's), with one INFO line and no WARNING."""

from __future__ import annotations

import json
import sys

import pytest
from harness.launch.plugin_probe import probe_env, run_probe, same_packages_path

TIMEOUT_S = 240

# After plugin_probe.LOG_COLLECTOR; harness.hook_state reads HookRegistry's (private) table.
PROBE = """
import importlib, json, sys

from sglang.srt.plugins import load_plugins
sys.path.insert(0, "test")  # cwd is the repository
from harness.hook_state import hook_registry_state

load_plugins()
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
registry = hook_registry_state()
print(sys.argv[2] + json.dumps({
    "hooks": {t: list(names) for t, names in registry.registered.items()},
    "patched": sorted(registry.applied),
    "records": records,
}))
"""


@pytest.mark.timeout(TIMEOUT_S + 30)
def test_the_entry_point_applies_exactly_the_0_5_14_adapter() -> None:
    from sglang_specinit import compat, sglang_0_5_14
    from sglang_specinit.hooks import adapter_patches

    ours = adapter_patches(sglang_0_5_14)
    # The release under test (a sibling wheel, too) and the plugin this test imports.
    env = probe_env(SGLANG_USE_CPU_ENGINE="1", PYTHONPATH=same_packages_path())
    summary = run_probe(sys.executable, PROBE, [json.dumps(sorted(ours))], env, TIMEOUT_S)

    specinit = {t for t, names in summary["hooks"].items() if "specinit" in names}
    expected = {hook.target for patch in ours.values() for hook in patch.hooks}
    assert specinit == expected
    assert expected <= set(summary["patched"])
    messages = [r for r in summary["records"] if r["logger"].startswith("sglang_specinit")]
    version = compat.installed_sglang_version()
    assert any(
        r["level"] == "INFO" and f"active on sglang {version}" in r["message"] for r in messages
    ), messages
    assert not [r for r in messages if r["level"] == "WARNING"], messages
