"""The ``sglang_0_5_14`` adapter's hook targets and required attributes match the installed
0.5.14 / 0.5.15, and the facts it is built on hold there."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest


def test_the_release_is_served_by_the_0_5_14_adapter() -> None:
    from harness.releases import generation_rows, installed_row
    from sglang_specinit import compat

    row = installed_row()
    assert row in generation_rows("sglang_0_5_14")
    decision = compat.decide_for_version(compat.installed_sglang_version())
    assert (decision.adapter, decision.sglang_version) == (row.adapter, row.name)


def test_every_patched_module_matches_the_adapter() -> None:
    from sglang_specinit import sglang_0_5_14
    from sglang_specinit.hooks import adapter_patches, module_problems

    problems = []
    for name, patch in adapter_patches(sglang_0_5_14).items():
        problems += module_problems(importlib.import_module(name), patch)
    assert problems == []


def test_the_0_5_23_adapter_would_be_refused_here() -> None:
    from sglang_specinit import sglang_0_5_23
    from sglang_specinit.hooks import adapter_patches

    names = adapter_patches(sglang_0_5_23)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sglang.srt.mem_cache.kv_cache_configurator")
    assert "sglang.srt.mem_cache.kv_cache_configurator" in names


def test_configurators_take_the_model_runner() -> None:
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    assert tuple(inspect.signature(create_memory_pool_configurator).parameters) == ("mr",)


def test_the_probe_restores_every_attribute_the_pool_building_sets() -> None:
    from sglang.srt.model_executor.model_runner_kv_cache_mixin import ModelRunnerKVCacheMixin
    from sglang_specinit.sglang_0_5_14.pool_probe import RUNNER_ATTRS

    assigned = set()
    for method in ("_apply_memory_pool_config", "_init_pools"):
        source = inspect.getsource(getattr(ModelRunnerKVCacheMixin, method))
        assigned |= set(re.findall(r"self\.(\w+)\s*=[^=]", source))
    assert assigned - set(RUNNER_ATTRS) == set()


def test_stock_reserves_the_draft_at_the_targets_geometry() -> None:
    from harness.launch.sglang_release import sglang_release
    from sglang.srt.model_executor.pool_configurator import (
        DefaultPoolConfigurator,
        HybridSWAPoolConfigurator,
    )

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
