"""The ``sglang_0_5_14`` adapter's hook targets and required attributes match the installed
0.5.14 / 0.5.15, and the facts it is built on hold there.

The same check the plugin runs when SGLang imports each module (``hooks.module_problems``), on
every module at once, so a changed signature fails CI rather than switching the plugin off at
a user's launch. Imports SGLang in the test process (``conftest.py``: CPU engine). ~25 s here.
"""

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
    """The generation this adapter exists for: 0.5.23's sizing targets (``KVCacheConfigurator``)
    are not in these releases, so the all-or-nothing guard refuses that adapter's tables."""
    from sglang_specinit import sglang_0_5_23
    from sglang_specinit.hooks import adapter_patches

    names = adapter_patches(sglang_0_5_23)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sglang.srt.mem_cache.kv_cache_configurator")
    assert "sglang.srt.mem_cache.kv_cache_configurator" in names


def test_configurators_take_the_model_runner() -> None:
    """``create_memory_pool_configurator(mr)``: the runner owns the sizing inputs here
    (:mod:`sglang_specinit.sglang_0_5_14.runtime_budget` hands it ``self``)."""
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    assert tuple(inspect.signature(create_memory_pool_configurator).parameters) == ("mr",)


def test_the_probe_restores_every_attribute_the_pool_building_sets() -> None:
    """Every ``self.<name> =`` in ``_apply_memory_pool_config`` and ``_init_pools`` (the code
    :mod:`.pool_probe` runs on the live runners) is one the probe puts back."""
    from sglang.srt.model_executor.model_runner_kv_cache_mixin import ModelRunnerKVCacheMixin
    from sglang_specinit.sglang_0_5_14.pool_probe import RUNNER_ATTRS

    assigned = set()
    for method in ("_apply_memory_pool_config", "_init_pools"):
        source = inspect.getsource(getattr(ModelRunnerKVCacheMixin, method))
        assigned |= set(re.findall(r"self\.(\w+)\s*=[^=]", source))
    assert assigned - set(RUNNER_ATTRS) == set()


def test_stock_reserves_the_draft_at_the_targets_geometry() -> None:
    """What the adapter replaces: stock prices the draft as ``eagle_draft_num_layers`` layers of
    the *target's* geometry, read off the target runner inside ``DefaultPoolConfigurator``
    (``pool_configurator.py:131-145`` in 0.5.14); the hybrid-SWA configurator has no draft term
    in 0.5.14 and one at the target's full-layer geometry from 0.5.15 (``:319-349``)."""
    from harness.launch.sglang_release import sglang_release
    from sglang.srt.model_executor.pool_configurator import (
        DefaultPoolConfigurator,
        HybridSWAPoolConfigurator,
    )

    assert "eagle_draft_num_layers" in inspect.getsource(DefaultPoolConfigurator.__init__)
    swa = inspect.getsource(HybridSWAPoolConfigurator.__init__)
    assert ("eagle_draft_num_layers" in swa) == (sglang_release() >= (0, 5, 15))


def test_the_hook_runs_every_step_of_the_stock_method_but_the_division() -> None:
    """Every step stock ``_resolve_memory_pool_config`` takes (each ``self.`` / configurator
    call in its body) is one the hook's ``_resolve`` takes too, except ``calculate_pool_sizes``
    (stock's division, the one thing replaced): a step a release adds (0.5.15's
    ``finalize_with_max_running_requests``) fails here until the hook runs it."""
    from sglang.srt.model_executor.model_runner_kv_cache_mixin import ModelRunnerKVCacheMixin
    from sglang_specinit.sglang_0_5_14 import runtime_budget

    stock = inspect.getsource(ModelRunnerKVCacheMixin._resolve_memory_pool_config)
    steps = set(re.findall(r"\b(?:self|configurator)\.(\w+)\(", stock))
    assert "calculate_pool_sizes" in steps
    ours = inspect.getsource(runtime_budget._resolve)
    assert {s for s in steps - {"calculate_pool_sizes"} if s not in ours} == set()
