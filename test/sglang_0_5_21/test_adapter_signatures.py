"""The ``sglang_0_5_23`` adapter's hook targets and required attributes match the installed
0.5.21, and so does every place 0.5.21 differs from 0.5.22 (``release_shims``).

The same check the plugin runs when SGLang imports each module (``hooks.module_problems`` on
the patch for this release: its tables plus ``release_shims.release_requires``), on every
module at once, so a changed signature fails CI rather than switching the plugin off at a
user's launch. Imports SGLang in the test process (``conftest.py``: CPU engine, the
``sgl_kernel`` test double). ~30 s here.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from importlib.metadata import version

from harness.launch.release_suite import INIT_KV_CACHE_CONFIGURATOR_PARAMS

RELEASE = "0.5.21"


def test_0_5_21_is_served_by_the_0_5_23_generation_adapter() -> None:
    import sglang
    from sglang_specinit import compat

    # Both the package metadata and the imported package are 0.5.21 (a sibling wheel on
    # PYTHONPATH must shadow the venv's release in both: scripts/sibling_release.sh).
    assert version("sglang") == RELEASE
    assert sglang.__version__ == RELEASE
    decision = compat.decide_for_version(compat.installed_sglang_version())
    assert (decision.adapter, decision.sglang_version) == ("sglang_0_5_23", RELEASE)


def test_every_patched_module_matches_the_adapter() -> None:
    from sglang_specinit import compat, sglang_0_5_23
    from sglang_specinit.hooks import adapter_patches, module_problems

    problems = []
    patches = adapter_patches(sglang_0_5_23, compat.installed_sglang_version())
    for name, patch in patches.items():
        problems += module_problems(importlib.import_module(name), patch)
    assert problems == []


def test_what_0_5_21_lacks_is_absent_as_release_shims_says() -> None:
    """No draft parallel layout (0.5.23), no fused draft entries and no KV-cache sharding
    (0.5.22), no attention-DP names on ``get_parallel()`` (0.5.22): each shim answers the
    0.5.21 form."""
    from sglang.srt import runtime_context
    from sglang.srt.arg_groups.arg_utils import field_names
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs
    from sglang_specinit.sglang_0_5_23 import release_shims

    params = tuple(inspect.signature(ModelRunner.init_kv_cache_configurator).parameters)[1:]
    assert params == INIT_KV_CACHE_CONFIGURATOR_PARAMS[RELEASE]
    fields = {f.name for f in dataclasses.fields(KVCacheConfigurator)}
    assert "draft_parallel_layout" not in fields
    assert not release_shims.has_draft_parallel_layout()
    assert release_shims.configurator_layout_kwargs() == {}

    assert not hasattr(KVCacheConfigurator, "fused_entry_bytes")
    assert release_shims.fused_entry_bytes(object(), "full") is None

    assert "enable_kv_cache_sharding" not in field_names(ServerArgs)
    assert "enable_dp_attention" in field_names(ServerArgs)
    assert "attn_dp_size" not in field_names(ServerArgs)
    assert not release_shims.kv_cache_sharding(object())

    # 0.5.21 derives the attention-DP width from --enable-dp-attention; 0.5.22 added
    # attn_dp_enabled / num_dp_ranks (the scheduler's rank fields read them).
    assert not hasattr(runtime_context, "attn_dp_enabled_of")
    assert not hasattr(runtime_context, "num_dp_ranks_of")
    assert hasattr(runtime_context, "attn_dp_size_of")
    assert not release_shims.has_attention_dp_names()


def test_the_planner_hands_0_5_21_only_the_platform_facts_it_knows() -> None:
    """0.5.21's ``override_platform`` refuses ``is_mps`` / ``is_sm110`` (0.5.22 added them): a
    CUDA plan for a Blackwell preset enters it with the facts 0.5.21 knows, and it answers them."""
    from sglang.srt import runtime_context
    from sglang_specinit.sglang_0_5_23.planned_device import _CUDA_HOST, _capability_facts
    from sglang_specinit.sglang_0_5_23.release_shims import known_platform_facts

    facts = dict(_CUDA_HOST, **_capability_facts(110))
    kept = known_platform_facts(facts)
    assert {"is_mps", "is_sm110"} <= set(facts) - set(kept)
    with runtime_context.override_platform(**kept):
        assert runtime_context.get_platform().is_cuda is True
        assert runtime_context.get_platform().is_sm100_or_sm110 is True
