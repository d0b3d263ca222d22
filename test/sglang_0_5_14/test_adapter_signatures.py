"""The ``sglang_0_5_14`` adapter's hook targets and required attributes match the installed
0.5.14 / 0.5.15, the facts it is built on hold there, and the entry point applies exactly it."""

from __future__ import annotations

import importlib
import inspect
import re
import sys

import pytest
from harness.launch.plugin_probe import probe_env, registry_probe, same_packages_path

TIMEOUT_S = 240


def test_the_release_is_served_by_the_0_5_14_adapter() -> None:
    from harness.releases import installed_row
    from sglang_specinit import compat
    from sglang_specinit.planner.releases import installed_replay
    from sglang_specinit.sglang_0_5_14 import planner_replay

    row = installed_row()
    assert row is not None and row.adapter == "sglang_0_5_14", row
    decision = compat.decide_for_version(compat.installed_sglang_version())
    assert (decision.adapter, decision.sglang_version) == (row.adapter, row.name)
    # The planner runs this release's replay (sglang_0_5_14/planner_replay.py).
    assert installed_replay() is planner_replay.REPLAY
    assert planner_replay.REPLAY.release == compat.installed_sglang_version()


def test_every_patched_module_matches_the_adapter_and_not_0_5_23_s() -> None:
    from sglang_specinit import sglang_0_5_14, sglang_0_5_23
    from sglang_specinit.hooks import adapter_patches, module_problems

    problems = []
    for name, patch in adapter_patches(sglang_0_5_14).items():
        problems += module_problems(importlib.import_module(name), patch)
    assert problems == []
    # The 0.5.23 adapter would be refused here: a module it patches does not exist.
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sglang.srt.mem_cache.kv_cache_configurator")
    assert "sglang.srt.mem_cache.kv_cache_configurator" in adapter_patches(sglang_0_5_23)


def test_configurators_take_the_runner_and_reserve_the_draft_at_target_geometry() -> None:
    from harness.launch.sglang_release import sglang_release
    from sglang.srt.model_executor.pool_configurator import (
        DefaultPoolConfigurator,
        HybridSWAPoolConfigurator,
        create_memory_pool_configurator,
    )

    assert tuple(inspect.signature(create_memory_pool_configurator).parameters) == ("mr",)
    assert "eagle_draft_num_layers" in inspect.getsource(DefaultPoolConfigurator.__init__)
    swa = inspect.getsource(HybridSWAPoolConfigurator.__init__)
    assert ("eagle_draft_num_layers" in swa) == (sglang_release() >= (0, 5, 15))


def test_the_hook_runs_every_step_of_the_stock_method_but_the_division() -> None:
    from sglang.srt.model_executor.model_runner_kv_cache_mixin import ModelRunnerKVCacheMixin
    from sglang_specinit.sglang_0_5_14 import runtime_budget

    stock = inspect.getsource(ModelRunnerKVCacheMixin._resolve_memory_pool_config)
    steps = set(re.findall(r"\b(?:self|configurator)\.(\w+)\(", stock))
    assert "calculate_pool_sizes" in steps
    ours = inspect.getsource(runtime_budget._resolve)
    assert {s for s in steps - {"calculate_pool_sizes"} if s not in ours} == set()


@pytest.mark.timeout(TIMEOUT_S + 30)
def test_the_entry_point_applies_exactly_the_0_5_14_adapter() -> None:
    """One INFO line, no WARNING, and none of 0.5.13's nor 0.5.23's hooks."""
    from sglang_specinit import compat, sglang_0_5_14
    from sglang_specinit.hooks import adapter_patches

    ours = adapter_patches(sglang_0_5_14)
    # The release under test (a sibling wheel, too) and the plugin this test imports.
    env = probe_env(SGLANG_USE_CPU_ENGINE="1", PYTHONPATH=same_packages_path())
    summary = registry_probe(sys.executable, env, TIMEOUT_S, modules=sorted(ours))

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
