"""The ``sglang_0_5_23`` adapter's hooks match the installed release (0.5.16 - 0.5.23), and where
releases differ ``release_shims`` answers as the release's row (:mod:`harness.releases`) says."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import sys
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import pytest
from harness.releases import Release, installed_row

ROW: Release = installed_row()  # type: ignore[assignment]  # the gate collects only served rows


def assert_present(owner: object, names: tuple[str, ...], present: bool) -> None:
    """Each of ``names`` is a callable of ``owner`` when ``present``, and absent otherwise."""
    for name in names:
        assert callable(getattr(owner, name, None)) if present else not hasattr(owner, name), name


def test_the_release_is_served_by_the_0_5_23_generation_adapter() -> None:
    import sglang
    from sglang_specinit import compat

    # A sibling wheel on PYTHONPATH must shadow the venv's release in both.
    assert version("sglang") == sglang.__version__ == ROW.name
    decision = compat.decide_for_version(compat.installed_sglang_version())
    assert (decision.adapter, decision.sglang_version) == ("sglang_0_5_23", ROW.name)


def test_every_patched_module_matches_the_adapter_and_no_module_copies_a_hook() -> None:
    from sglang_specinit import compat, sglang_0_5_23
    from sglang_specinit.hooks import adapter_patches, module_problems

    patches = adapter_patches(sglang_0_5_23, compat.installed_sglang_version())
    # The ParallelState generation's own requirement is part of the check.
    required = {r.qualname for p in patches.values() for r in p.requires}
    assert ("KVCacheConfigurator.ps" in required) == ROW.parallel_state
    problems, copies = [], []
    for name, patch in patches.items():
        module = importlib.import_module(name)
        problems += module_problems(module, patch)
        for hook in patch.hooks:
            owner_path, _, attr = hook.qualname.rpartition(".")
            owner = functools.reduce(getattr, owner_path.split("."), module)
            assert isinstance(owner, type), f"{hook.target} is not a method"
            original = vars(owner)[attr]
            original = getattr(original, "__func__", original)  # classmethod, staticmethod
            copies += [
                f"{hook.target} as {other.__name__}.{key}"
                for other in list(sys.modules.values())
                if other is not None and other is not module and hasattr(other, "__dict__")
                for key, value in list(vars(other).items())
                if value is original
            ]
    assert problems == []
    assert copies == []


def test_the_draft_layout_fused_entries_sharding_and_dp_names_are_as_release_shims_says() -> None:
    from sglang.srt import runtime_context
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang_specinit.sglang_0_5_23 import release_shims

    layout = ROW.draft_parallel_layout
    params = tuple(inspect.signature(ModelRunner.init_kv_cache_configurator).parameters)[1:]
    assert params == (("draft_parallel_layout",) if layout else ())
    assert release_shims.row(ROW.name).draft_parallel_layout == layout
    fields = {f.name for f in dataclasses.fields(KVCacheConfigurator)}
    if not layout:
        assert "draft_parallel_layout" not in fields
        assert not release_shims.row().draft_parallel_layout
        assert release_shims.configurator_layout_kwargs() == {}

    from sglang.srt.server_args import ServerArgs

    if dataclasses.is_dataclass(ServerArgs):  # 0.5.16 - 0.5.18
        names = {f.name for f in dataclasses.fields(ServerArgs)}
    else:
        from sglang.srt.arg_groups.arg_utils import field_names

        names = set(field_names(ServerArgs))
    # What release_shims takes from 0.5.22 on; before it, attention DP is --enable-dp-attention
    # + --dp-size, its width derived.
    fused = ROW.fused_entries
    assert_present(KVCacheConfigurator, ("fused_entry_bytes",), fused)
    assert_present(runtime_context, ("attn_dp_enabled_of", "num_dp_ranks_of"), fused)
    assert bool(release_shims.row().attention_dp_names) == fused
    new_names = {"enable_kv_cache_sharding", "attn_dp_size"}
    assert names & new_names == (new_names if fused else set())
    if fused:
        return
    assert release_shims.fused_entry_bytes(object(), "full") is None
    assert not release_shims.kv_cache_sharding(object())
    assert importlib.util.find_spec(release_shims.KV_SHARD_HOOK) is None
    assert release_shims.KV_SHARD_HOOK not in release_shims.present_capacity_readers(
        (release_shims.KV_SHARD_HOOK,)
    )
    assert {"enable_dp_attention", "dp_size"} <= names
    assert hasattr(runtime_context, "attn_dp_size_of") == ROW.widths_at_publish


@pytest.mark.skipif(
    ROW.platform_facts_lacking is None, reason=f"{ROW.name}: the planner's platform facts unchecked"
)
def test_the_planner_hands_the_release_only_the_platform_facts_it_knows() -> None:
    from sglang.srt import runtime_context
    from sglang_specinit.sglang_0_5_23.planned_device import _CUDA_HOST, _capability_facts
    from sglang_specinit.sglang_0_5_23.release_shims import known_platform_facts

    facts = dict(_CUDA_HOST, **_capability_facts(110))
    kept = known_platform_facts(facts)
    assert set(ROW.platform_facts_lacking or ()) <= set(facts) - set(kept)
    with runtime_context.override_platform(**kept):
        assert runtime_context.get_platform().is_cuda is True
        assert runtime_context.get_platform().is_sm100_or_sm110 is True


@pytest.mark.skipif(
    ROW.dataclass_server_args, reason=f"{ROW.name}: no resolution module reads the capacity"
)
def test_capacity_readers_are_every_resolution_module_that_reads_it() -> None:
    import sglang.srt.arg_groups as arg_groups
    from sglang_specinit.sglang_0_5_23.planned_device import CAPACITY_READERS
    from sglang_specinit.sglang_0_5_23.release_shims import present_capacity_readers

    root = Path(arg_groups.__file__).parent
    readers = {
        "sglang.srt.arg_groups." + ".".join(path.relative_to(root).with_suffix("").parts)
        for path in root.rglob("*.py")
        if "get_device_memory_capacity" in path.read_text()
    }
    assert readers == set(present_capacity_readers(CAPACITY_READERS))


@pytest.mark.skipif(
    not ROW.parallel_state, reason=f"{ROW.name} has no ParallelState configurator (0.5.16-0.5.20)"
)
def test_the_parallel_state_generation_is_as_release_shims_says() -> None:
    """Its ParallelState, attention widths, resolution and configuration bags."""
    from sglang.srt import runtime_context
    from sglang.srt.distributed.parallel_state_wrapper import ParallelState
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.mem_cache import kv_cache_configurator
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.model_executor.model_runner_components import layer_setup
    from sglang.srt.runtime_context import ParallelContext
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang_specinit.sglang_0_5_23 import release_shims

    # The configurator and scheduler hold a ParallelState.
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

    # The attention widths: 0.5.20's getters, computed at publish; stamped before 0.5.20.
    widths_at_publish = release_shims.row().widths_at_publish
    assert widths_at_publish == ROW.widths_at_publish
    assert_present(runtime_context, ("attn_tp_size_of", "attn_dp_size_of"), widths_at_publish)
    # 0.5.16 - 0.5.18 keep 0.5.15's dataclass ServerArgs: no resolving_view, no resolution
    # pipeline modules.
    resolving = release_shims.row().resolving_view
    assert resolving == (not ROW.dataclass_server_args)
    overrides = importlib.import_module("sglang.srt.arg_groups.overrides")
    assert hasattr(overrides, "resolving_view") == resolving
    required = {r.qualname for r in release_shims.release_requires(ROW.name)}
    assert ("resolving_view" in required) == resolving
    # 0.5.16's and 0.5.17's profile reserves nothing for a multimodal runtime.
    reserves = hasattr(kv_cache_configurator, "mm_runtime_reservation_gb")
    assert reserves == ROW.mm_reservation
    assert ("mm_runtime_reservation_gb" in required) == reserves
    if not reserves:
        assert release_shims.multimodal_reservation_gb() == 0.0
    if ROW.dataclass_server_args:
        from sglang.srt.server_args import ServerArgs

        assert dataclasses.is_dataclass(ServerArgs)
        assert not hasattr(ServerArgs, "resolve_once")
        for module in ("memory_hook", "pipeline"):
            assert importlib.util.find_spec(f"sglang.srt.arg_groups.{module}") is None
    else:
        assert hasattr(runtime_context, "derive_attention_widths")
        if not widths_at_publish:  # what stamp_published_widths calls
            assert_present(ParallelContext, ("stamp_derived_widths", "clear_derived_widths"), True)
        # 0.5.19's resolution pipeline reads the capacity and hands it to the memory step.
        memory_step = importlib.import_module("sglang.srt.arg_groups.memory_hook")
        assert hasattr(memory_step, "get_device_memory_capacity") == widths_at_publish

    layer_params = set(inspect.signature(layer_setup.resolve_layer_indices).parameters)
    assert "spec_algorithm" in layer_params and "draft_model_idx" not in layer_params
    assert "full_attention_layer_ids" not in layer_setup.ModelLayerInfo.__struct_fields__
    if ROW.config_bags:
        assert "ranks" not in inspect.signature(runtime_context.publish).parameters
    assert release_shims.publish_kwargs() == {}

    # The configuration bags.
    bags = ROW.config_bags
    assert release_shims.row().config_bags == bags
    assert_present(runtime_context, ("get_schedule", "get_model", "get_spec", "publish"), bags)
    assert ("kv_cache_dtype_str" in fields) == bags
    expected = {"kv_cache_dtype_str": "auto"} if bags else {}
    assert release_shims.kv_cache_dtype_str_kwargs("auto") == expected
    assert ("get_schedule" in required) == bags
    assert ("KVCacheConfigurator.server_args" in required) == (not bags)
    # Drafts with their own KV dtype: the DFLASH family from 0.5.17, DFLASH only on 0.5.16.
    runner = inspect.getsource(ModelRunner.configure_kv_cache_dtype)
    assert ("is_dflash_family()" in runner) == bags
    assert release_shims.draft_kv_own_dtype(SpeculativeAlgorithm.DSPARK) == bags
    assert release_shims.draft_kv_own_dtype(SpeculativeAlgorithm.DFLASH)
    if bags:
        return
    # The steps the hook keeps read the configurator's ServerArgs where 0.5.17 reads the bag.
    for step in ("_profile_available_bytes", "_apply_token_constraints", "resolve_max_num_reqs"):
        source = inspect.getsource(getattr(KVCacheConfigurator, step))
        assert "self.server_args." in source and "get_schedule" not in source, step
    assert hasattr(runtime_context.RuntimeContext, "set_server_args")
    args = SimpleNamespace(max_mamba_cache_size=300, mem_fraction_static=0.5)
    kvc = SimpleNamespace(server_args=args)
    assert release_shims.schedule_of(kvc) is args
    with release_shims.scoped_schedule(kvc, max_mamba_cache_size=1, not_a_field=2):
        assert args.max_mamba_cache_size == 1 and not hasattr(args, "not_a_field")
    assert args.max_mamba_cache_size == 300
    assert release_shims.published_bags(args) == (args, args, args)


@pytest.mark.skipif(
    not ROW.dataclass_server_args,
    reason="0.5.19+ resolve into declarations: this suite's fault matrix on 0.5.23",
)
def test_the_launch_checks_read_what_this_release_resolves_into() -> None:
    from sglang_specinit.launch_checks import LaunchCheckError
    from sglang_specinit.sglang_0_5_23.launch_checks import check_launch

    fields = SimpleNamespace(
        speculative_algorithm="EAGLE3",
        mem_fraction_static=5.0,
        max_total_tokens=None,
        page_size=1,
        model_path="org/target",
        speculative_draft_model_path="org/hub-id",  # not a local directory: not read
    )
    with pytest.raises(LaunchCheckError, match="--mem-fraction-static 5.0"):
        check_launch(fields)
    fields.mem_fraction_static = 0.5
    fields.max_total_tokens = 1
    with pytest.raises(LaunchCheckError, match="--max-total-tokens 1 leaves no KV"):
        check_launch(fields)


@pytest.mark.skipif(
    ROW.config_bags,
    reason="0.5.17+'s init_token_map reads get_spec() and writes nothing (the same body "
    "0.5.17 - 0.5.20)",
)
def test_an_early_token_map_writes_no_field_the_target_sizing_reads(tmp_path: Path) -> None:
    import json

    import torch
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang_specinit.phased import early_binding

    token_map = tmp_path / "hot_token_map.pt"
    torch.save(torch.tensor([3, 1, 4, 1, 5]), token_map)  # what load_token_map reads
    # SGLang's dummy boundary: no resolution, no device probe.
    args = ServerArgs(model_path="dummy", speculative_token_map=str(token_map))
    draft = EagleDraftWorker.__new__(EagleDraftWorker)
    draft.server_args = args
    draft.speculative_algorithm = SpeculativeAlgorithm.EAGLE
    draft.init_lm_head = lambda: None  # test double: no loaded target to bind to
    before = {k: v for k, v in vars(args).items() if not k.startswith("_")}

    assert early_binding.bind_shared_weights_early(SimpleNamespace(draft_worker=draft))
    after = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    assert {k for k in before if before[k] != after[k]} == {"json_model_override_args"}
    assert json.loads(args.json_model_override_args) == {"hot_vocab_size": 5}
    hot = draft.hot_token_id
    assert list(hot) == [3, 1, 4, 1, 5]

    # alloc_memory_pool's own call, through the plugin's AROUND hook: skipped once.
    early_binding.init_token_map(EagleDraftWorker.init_token_map, draft)
    assert draft.hot_token_id is hot
    recorded = [
        source
        for log in ("_resolved_overrides", "_runtime_mutations")
        for source, _fields in getattr(args, log, [])
    ]
    assert recorded == ["eagle_worker.hot_token_map"]
