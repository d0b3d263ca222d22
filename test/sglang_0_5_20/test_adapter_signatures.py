"""The ``sglang_0_5_23`` adapter's hook targets and required attributes match the installed
0.5.20 (or 0.5.19, its sibling: there the checks pass too, and the release is declined for the
reason ``docs/releases.md`` gives), and every place this generation differs from 0.5.22 is
answered by ``release_shims`` in the form its docstring names.

The same check the plugin runs when SGLang imports each module (``hooks.module_problems`` on
the patch for this release: the phase tables plus ``release_shims.release_requires``), on
every module at once, so a changed signature fails CI rather than switching the plugin off at
a user's launch. Imports SGLang in the test process (``conftest.py``: CPU engine, the
``sgl_kernel`` test double). ~35 s here.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
from importlib.metadata import version

SERVED = "0.5.20"


def installed() -> str:
    import sglang

    # The package metadata and the imported package agree (a sibling wheel on PYTHONPATH must
    # shadow the venv's release in both).
    assert version("sglang") == sglang.__version__
    return sglang.__version__


def test_0_5_20_is_served_by_the_0_5_23_adapter_and_0_5_19_declined() -> None:
    from sglang.srt import runtime_context
    from sglang_specinit import compat

    release = installed()
    decision = compat.decide_for_version(compat.installed_sglang_version())
    if release == SERVED:
        assert (decision.adapter, decision.sglang_version) == ("sglang_0_5_23", release)
        return
    # 0.5.19 (docs/releases.md): declined with one INFO line; the planner's replay reads the
    # attention widths through helpers 0.5.19 does not have.
    assert decision.adapter is None and decision.not_served
    assert not hasattr(runtime_context, "attn_tp_size_of")


def test_every_patched_module_matches_the_adapter() -> None:
    from sglang_specinit import compat, sglang_0_5_23
    from sglang_specinit.hooks import adapter_patches, module_problems

    patches = adapter_patches(sglang_0_5_23, compat.installed_sglang_version())
    # This generation's own requirements are part of the check (the ParallelState field).
    assert "KVCacheConfigurator.ps" in {r.qualname for p in patches.values() for r in p.requires}
    problems = []
    for name, patch in patches.items():
        problems += module_problems(importlib.import_module(name), patch)
    assert problems == []


def test_the_configurator_and_scheduler_hold_a_parallel_state() -> None:
    """``ps`` instead of the width fields; the scheduler builds its own ``ParallelState``, whose
    fields are the ones ``release_shims.scheduler_ranks`` reads."""
    from sglang.srt.distributed.parallel_state_wrapper import ParallelState
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang_specinit.sglang_0_5_23 import release_shims

    assert release_shims.has_parallel_state()
    fields = {f.name for f in dataclasses.fields(KVCacheConfigurator)}
    assert "ps" in fields
    assert not {"attn_dp_size", "pp_size", "draft_parallel_layout"} & fields
    state_fields = {f.name for f in dataclasses.fields(ParallelState)}
    read = {"dp_rank", "pp_rank", "tp_rank", "attn_dp_rank", "attn_tp_rank", "pp_size"}
    assert read | {"tp_size", "attn_tp_size", "dp_size", "attn_dp_size"} <= state_fields
    init = inspect.getsource(Scheduler.__init__)
    assert "self.ps = ParallelState(" in init
    assert "self.enable_dp_attention =" in init


def test_what_this_generation_lacks_is_absent_as_release_shims_says() -> None:
    from sglang.srt import runtime_context
    from sglang.srt.arg_groups.arg_utils import field_names
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.model_executor.model_runner_components import layer_setup
    from sglang.srt.server_args import ServerArgs
    from sglang_specinit.sglang_0_5_23 import release_shims

    release = installed()
    params = tuple(inspect.signature(ModelRunner.init_kv_cache_configurator).parameters)[1:]
    assert params == release_shims.INIT_KV_CACHE_CONFIGURATOR_PARAMS[release]
    assert not release_shims.has_draft_parallel_layout()
    assert release_shims.configurator_layout_kwargs() == {}

    assert not hasattr(KVCacheConfigurator, "fused_entry_bytes")
    assert release_shims.fused_entry_bytes(object(), "full") is None

    names = field_names(ServerArgs)
    assert "enable_kv_cache_sharding" not in names
    assert not release_shims.kv_cache_sharding(object())
    assert importlib.util.find_spec(release_shims.KV_SHARD_HOOK) is None
    assert release_shims.KV_SHARD_HOOK not in release_shims.present_capacity_readers(
        (release_shims.KV_SHARD_HOOK,)
    )
    # Attention DP is --enable-dp-attention + --dp-size; its width is derived.
    assert {"enable_dp_attention", "dp_size"} <= names
    assert "attn_dp_size" not in names
    assert not hasattr(runtime_context, "attn_dp_enabled_of")
    if release == SERVED:  # what derived_server_arg calls there (0.5.19 lacks it: declined)
        assert hasattr(runtime_context, "attn_dp_size_of")

    layer_params = set(inspect.signature(layer_setup.resolve_layer_indices).parameters)
    assert "spec_algorithm" in layer_params and "draft_model_idx" not in layer_params
    assert "full_attention_layer_ids" not in layer_setup.ModelLayerInfo.__struct_fields__
    assert "ranks" not in inspect.signature(runtime_context.publish).parameters
    assert release_shims.publish_kwargs() == {}
