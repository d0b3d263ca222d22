"""The ``sglang_0_5_23`` adapter's hook targets and required attributes match the installed
0.5.22, and so does the one place 0.5.22 differs (``release_shims``).

The same check the plugin runs when SGLang imports each module (``hooks.module_problems``),
on every module at once, so a changed signature fails CI rather than switching the plugin off
at a user's launch. Imports SGLang in the test process (``conftest.py``: CPU engine, the
``sgl_kernel`` test double). ~25 s here.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect

from harness.launch.release_suite import INIT_KV_CACHE_CONFIGURATOR_PARAMS


def test_0_5_22_is_served_by_the_0_5_23_generation_adapter() -> None:
    from sglang_specinit import compat

    decision = compat.decide_for_version(compat.installed_sglang_version())
    assert (decision.adapter, decision.sglang_version) == ("sglang_0_5_23", "0.5.22")


def test_every_patched_module_matches_the_adapter() -> None:
    from sglang_specinit import sglang_0_5_23
    from sglang_specinit.hooks import adapter_patches, module_problems

    problems = []
    for name, patch in adapter_patches(sglang_0_5_23).items():
        problems += module_problems(importlib.import_module(name), patch)
    assert problems == []


def test_the_draft_parallel_layout_is_absent_as_release_shims_says() -> None:
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang_specinit.sglang_0_5_23 import release_shims

    params = tuple(inspect.signature(ModelRunner.init_kv_cache_configurator).parameters)[1:]
    assert params == INIT_KV_CACHE_CONFIGURATOR_PARAMS["0.5.22"]
    fields = {f.name for f in dataclasses.fields(KVCacheConfigurator)}
    assert "draft_parallel_layout" not in fields
    assert not release_shims.has_draft_parallel_layout()
    assert release_shims.configurator_layout_kwargs() == {}


def test_what_0_5_22_added_over_0_5_21_is_present_as_release_shims_says() -> None:
    """Fused draft entries, ``--enable-kv-cache-sharding`` and the attention-DP names: the
    forms release_shims takes from 0.5.22 on (test/sglang_0_5_21 checks their absence)."""
    from sglang.srt import runtime_context
    from sglang.srt.arg_groups.arg_utils import field_names
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.server_args import ServerArgs
    from sglang_specinit.sglang_0_5_23 import release_shims

    assert callable(KVCacheConfigurator.fused_entry_bytes)
    assert {"enable_kv_cache_sharding", "attn_dp_size"} <= field_names(ServerArgs)
    assert callable(runtime_context.attn_dp_enabled_of)
    assert callable(runtime_context.num_dp_ranks_of)
    assert release_shims.has_attention_dp_names()
