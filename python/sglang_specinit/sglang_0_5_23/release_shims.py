"""What differs between the releases the 0.5.23 adapter serves: one row per release, read here.

The phase modules run unchanged on each release; these functions read the installed release's
row. docs/releases.md ("The 0.5.16 - 0.5.23 release table") says what each field means.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from sglang_specinit.hooks import Requires


@dataclass(frozen=True)
class ReleaseRow:
    """What a release has that the oldest of the generation lacks (all False there)."""

    config_bags: bool = False
    draft_kv_cache_dtype: bool = False
    mm_reservation: bool = False
    attn_dcp_size_name: bool = False
    resolving_view: bool = False
    widths_at_publish: bool = False
    runtime_context_ranks: bool = False
    pp_spec: bool = False
    fused_draft_entries: bool = False
    kv_cache_sharding: bool = False
    attention_dp_names: bool = False
    draft_parallel_layout: bool = False
    # The planner replay prices DeepSeek-V4's compressed pools.
    deepseek_v4_pools: bool = False


def _cumulative(changes: tuple[tuple[str, dict[str, bool]], ...]) -> dict[str, ReleaseRow]:
    rows, row = {}, ReleaseRow()
    for release, changed in changes:
        row = replace(row, **changed)
        rows[release] = row
    return rows


# Each release: what it adds over the one before.
RELEASE_TABLE: dict[str, ReleaseRow] = _cumulative(
    (
        ("0.5.16", {}),
        ("0.5.17", {"config_bags": True}),
        ("0.5.18", {"draft_kv_cache_dtype": True, "mm_reservation": True,
                    "attn_dcp_size_name": True}),
        ("0.5.19", {"resolving_view": True}),
        ("0.5.20", {"widths_at_publish": True}),
        ("0.5.21", {"runtime_context_ranks": True, "pp_spec": True, "deepseek_v4_pools": True}),
        ("0.5.22", {"fused_draft_entries": True, "kv_cache_sharding": True,
                    "attention_dp_names": True}),
        ("0.5.23", {"draft_parallel_layout": True}),
    )
)

KV_SHARD_HOOK = "sglang.srt.arg_groups.kv_shard_hook"
PIPELINE_CAPACITY_READER = "sglang.srt.arg_groups.pipeline"
_RUNTIME_CONTEXT = "sglang.srt.runtime_context"
_KVC = "sglang.srt.mem_cache.kv_cache_configurator"
_PARALLEL_STATE = "sglang.srt.distributed.parallel_state_wrapper"
_LAYER_SETUP = "sglang.srt.model_executor.model_runner_components.layer_setup"
_OVERRIDES = "sglang.srt.arg_groups.overrides"


@cache
def row(release: str | None = None) -> ReleaseRow:
    """``release``'s row (default: installed); else the newest row not newer than it."""
    from sglang_specinit.compat import installed_sglang_version, release_key

    version = release if release is not None else installed_sglang_version()
    if version in RELEASE_TABLE:
        return RELEASE_TABLE[version]
    key = release_key(version) if version is not None else None
    older = [r for r in RELEASE_TABLE if key is not None and release_key(r) <= key]
    return RELEASE_TABLE[older[-1]] if older else ReleaseRow()


def has_parallel_state(release: str | None = None) -> bool:
    """True where schedulers and configurators hold a ``ParallelState`` (default: installed)."""
    return not row(release).runtime_context_ranks


def release_requires(release: str | None = None) -> tuple[Requires, ...]:
    """What the adapter reads on ``release`` beyond its patch tables, in that release's form."""
    found: list[Requires] = []
    if has_parallel_state(release):
        found += [
            Requires(_KVC, "KVCacheConfigurator.ps"),
            Requires(_PARALLEL_STATE, "ParallelState.attn_dp_size"),
            Requires(_LAYER_SETUP, "adjust_hybrid_swa_layer_ids"),
        ]
    else:
        found.append(Requires(_KVC, "KVCacheConfigurator.attn_dp_size"))
    if row(release).fused_draft_entries:
        found.append(Requires(_KVC, "KVCacheConfigurator.fused_entry_bytes"))
    if row(release).resolving_view:  # launch_checks reads the resolved flags through it
        found.append(Requires(_OVERRIDES, "resolving_view"))
    if row(release).config_bags:  # the sizing and the probe read the schedule bag ...
        found.append(Requires(_RUNTIME_CONTEXT, "get_schedule"))
    else:  # ... or, on 0.5.16, the configurator's own ServerArgs (schedule_of)
        found.append(Requires(_KVC, "KVCacheConfigurator.server_args"))
    if row(release).mm_reservation:  # multimodal_reservation_gb reads them
        found += [
            Requires(_KVC, "mm_runtime_reservation_gb"),
            Requires(_RUNTIME_CONTEXT, "get_mm"),
        ]
    return tuple(found)


def schedule_of(kvc: Any) -> Any:
    """The schedule a configurator sizes with: the bag, else its own ``server_args``."""
    if not row().config_bags:
        return kvc.server_args
    from sglang.srt.runtime_context import get_schedule

    return get_schedule()


@contextlib.contextmanager
def scoped_schedule(kvc: Any, **fields: Any) -> Iterator[None]:
    """The schedule's ``fields`` set for the duration, without a runtime adjustment's log."""
    if row().config_bags:
        schedule = schedule_of(kvc)
        present = {name: value for name, value in fields.items() if name in schedule}
        with schedule.override(**present) if present else contextlib.nullcontext():
            yield
        return
    args = kvc.server_args
    saved = {name: getattr(args, name) for name in fields if hasattr(args, name)}
    try:
        for name in saved:
            object.__setattr__(args, name, fields[name])
        yield
    finally:
        for name, value in saved.items():
            object.__setattr__(args, name, value)


def published_bags(server_args: Any) -> tuple[Any, Any, Any]:
    """(model, spec, schedule) of a published launch, as its ``ModelRunner`` reads them."""
    if not row().config_bags:
        return server_args, server_args, server_args
    from sglang.srt.runtime_context import get_model, get_schedule, get_spec

    return get_model(), get_spec(), get_schedule()


def publish_launch(server_args: Any) -> None:
    """Publish an offline rank-0 scheduler's ``ServerArgs`` as the release records it."""
    from sglang.srt import runtime_context

    if not row().config_bags:
        runtime_context.get_context().set_server_args(server_args)
        return
    runtime_context.publish(server_args, role="scheduler", **publish_kwargs())


def kv_cache_dtype_str_kwargs(dtype_str: str) -> dict[str, Any]:
    """The configurator's ``kv_cache_dtype_str`` keyword, where it has one."""
    return {"kv_cache_dtype_str": dtype_str} if row().config_bags else {}


def draft_kv_own_dtype(spec_algorithm: Any) -> bool:
    """``configure_kv_cache_dtype``'s ``is_dflash`` as the release's runner passes it."""
    if row().config_bags:
        return bool(spec_algorithm.is_dflash_family())
    return bool(spec_algorithm.is_dflash())


def draft_kv_cache_dtype_kwargs(source: Any) -> dict[str, Any]:
    """``configure_kv_cache_dtype``'s draft-dtype keyword from ``source``, where it exists."""
    if not row().draft_kv_cache_dtype:
        return {}
    return {"speculative_draft_kv_cache_dtype": source.speculative_draft_kv_cache_dtype}


def multimodal_reservation_gb() -> float:
    """What ``_profile_available_bytes`` holds back for a multimodal target's runtime."""
    if not row().mm_reservation:
        return 0.0
    from sglang.srt.mem_cache.kv_cache_configurator import mm_runtime_reservation_gb
    from sglang.srt.runtime_context import get_mm

    return float(
        mm_runtime_reservation_gb(
            is_multimodal=True, mm_feature_transport=get_mm().mm_feature_transport
        )
    )


def configurator_layout_kwargs(draft_parallel_layout: Any = None) -> dict[str, Any]:
    """The ``KVCacheConfigurator`` layout keyword, where it has one."""
    if row().draft_parallel_layout:
        return {"draft_parallel_layout": draft_parallel_layout}
    return {}


def attn_dp_size(kvc: Any) -> int:
    """A configurator's attention-DP width."""
    return int(kvc.ps.attn_dp_size if has_parallel_state() else kvc.attn_dp_size)


def fused_entry_bytes(kvc: Any, sub_pool: str) -> int | None:
    """``kvc.fused_entry_bytes(sub_pool)``; None where no draft pool is fused."""
    if row().fused_draft_entries:
        return kvc.fused_entry_bytes(sub_pool)
    return None


def pp_spec_enabled() -> bool:
    """``SGLANG_ENABLE_PP_SPEC``; False where the release has no such switch."""
    if not row().pp_spec:
        return False
    from sglang.srt.environ import envs

    return bool(envs.SGLANG_ENABLE_PP_SPEC.get())


def fused_host_names() -> tuple[str, ...]:
    """The target sub-pools a draft may fuse into."""
    if not row().fused_draft_entries:
        return ()
    try:
        from sglang.srt.mem_cache.layout.fused_draft import HOST_KINDS
    except ImportError:  # no registry: the full-attention pool only
        return ("full",)
    return tuple(HOST_KINDS)


def kv_cache_sharding(server_args: Any) -> bool:
    """``--enable-kv-cache-sharding``; False where the flag does not exist."""
    return bool(server_args.enable_kv_cache_sharding) if row().kv_cache_sharding else False


def scheduler_ranks(scheduler: Any) -> Any:
    """This scheduler's ranks and widths, under ``get_parallel()``'s names."""
    from types import SimpleNamespace

    names = ("dp_rank", "pp_rank", "tp_rank", "attn_dp_rank", "attn_tp_rank")
    names += ("pp_size", "tp_size", "attn_tp_size")
    if has_parallel_state():
        ps, enabled = scheduler.ps, scheduler.enable_dp_attention
    else:
        from sglang.srt.runtime_context import get_parallel

        ps = get_parallel()
        if row().attention_dp_names:
            return ps
        enabled = ps.enable_dp_attention
    return SimpleNamespace(
        **{name: getattr(ps, name) for name in names},
        attn_dp_enabled=bool(enabled),
        num_dp_ranks=int(ps.dp_size),
    )


def configurator_parallel_kwargs(server_args: Any) -> dict[str, Any]:
    """The parallel keywords of the planner's offline rank-0 ``KVCacheConfigurator``."""
    from sglang.srt.runtime_context import get_parallel

    parallel = get_parallel()
    if not has_parallel_state():
        return {"attn_dp_size": parallel.attn_dp_size, "pp_size": 1}
    from sglang.srt.distributed.parallel_state_wrapper import ParallelState

    flags = parallel if row().config_bags else server_args
    dcp_name = "attn_dcp_size" if row().attn_dcp_size_name else "dcp_size"
    return {
        "ps": ParallelState.trivial(
            tp_size=parallel.tp_size,
            dp_size=flags.dp_size,
            attn_tp_size=parallel.attn_tp_size,
            attn_cp_size=parallel.attn_cp_size,
            **{dcp_name: parallel.dcp_size},
            attn_dp_size=parallel.attn_dp_size,
            moe_ep_size=flags.ep_size,
            moe_dp_size=parallel.moe_dp_size,
        )
    }


def resolve_layer_info(model_config: Any, *, is_draft: bool, spec_algorithm: Any, **kw: Any) -> Any:
    """``resolve_layer_indices`` for a runner without weights, as the release calls it."""
    from sglang.srt.model_executor.model_runner_components import layer_setup

    if not has_parallel_state():
        return layer_setup.resolve_layer_indices(
            model=None, model_config=model_config, is_draft_worker=is_draft, **kw
        )
    info = layer_setup.resolve_layer_indices(
        model=None,
        model_config=model_config,
        is_draft_worker=is_draft,
        spec_algorithm=spec_algorithm,
    )
    layer_setup.adjust_hybrid_swa_layer_ids(
        model_config=model_config,
        start_layer=info.start_layer,
        end_layer=info.end_layer,
        is_hybrid_swa=model_config.is_hybrid_swa,
    )
    return info


def full_attention_layer_ids(kvc: Any) -> Any:
    """The full-attention layer ids a configurator's SWA split counts."""
    if has_parallel_state():
        return getattr(kvc.model_config, "full_attention_layer_ids", None)
    return kvc.layer_info.full_attention_layer_ids


def publish_kwargs() -> dict[str, Any]:
    """``runtime_context.publish``'s rank keyword for an offline rank-0 scheduler."""
    if has_parallel_state():
        return {}
    from sglang.srt import runtime_context

    return {"ranks": runtime_context.SpawnRanks(0, None, 0)}


NOT_DERIVED = object()


def derived_server_arg(view: Any, name: str) -> Any:
    """An attention-DP name the release derives rather than stores, else :data:`NOT_DERIVED`."""
    from sglang.srt import runtime_context

    if row().attention_dp_names:
        if name == "enable_dp_attention":
            return runtime_context.attn_dp_enabled_of(view)
    elif name == "attn_dp_size":
        if row().widths_at_publish:
            return runtime_context.attn_dp_size_of(view)
        return _attention_widths(view)[0]
    return NOT_DERIVED


def _attention_widths(view: Any) -> tuple[int, int]:
    """(attn_dp_size, attn_tp_size) of a config, by the release's own arithmetic."""
    from sglang.srt import runtime_context

    attn_dp, attn_tp = runtime_context.derive_attention_widths(
        tp_size=int(view.tp_size),
        attn_cp_size=int(view.attn_cp_size),
        dp_size=int(view.dp_size),
        enable_dp_attention=bool(view.enable_dp_attention),
    )
    return int(attn_dp), int(attn_tp)


def attn_tp_size_of(view: Any) -> int:
    """A resolved config's attention-TP width."""
    from sglang.srt import runtime_context

    if row().widths_at_publish:
        return int(runtime_context.attn_tp_size_of(view))
    return _attention_widths(view)[1]


def stamp_published_widths() -> None:
    """Stamp the widths an offline ``publish`` leaves to process groups (0.5.19)."""
    if row().widths_at_publish or not row().resolving_view:
        return
    from sglang.srt.runtime_context import derive_parallel_widths, get_parallel

    parallel = get_parallel()
    attn_dp, _ = _attention_widths(parallel)
    dcp = int(parallel.dcp_size)
    parallel.clear_derived_widths()  # a previous plan's publish in this process
    parallel.stamp_derived_widths(
        **derive_parallel_widths(
            tp_size=int(parallel.tp_size),
            attn_cp_size=int(parallel.attn_cp_size),
            attn_dp_size=attn_dp,
            moe_ep_size=int(parallel.ep_size),
            moe_dp_size=int(parallel.moe_dp_size),
            dcp_size=dcp,
            dcp_enabled=dcp > 1,
        )
    )


def present_capacity_readers(names: tuple[str, ...]) -> tuple[str, ...]:
    """The resolution modules of ``names`` that read the device capacity on this release."""
    if not row().widths_at_publish:
        return (PIPELINE_CAPACITY_READER,)
    if row().kv_cache_sharding:
        return names
    return tuple(name for name in names if name != KV_SHARD_HOOK)


def known_platform_facts(facts: dict[str, Any]) -> dict[str, Any]:
    """``facts`` without the names ``override_platform`` does not know (it refuses them)."""
    from sglang.srt import runtime_context

    known = set(getattr(runtime_context, "_PLATFORM_PROBES", ())) | set(
        getattr(runtime_context, "_PLATFORM_VALUES", ())
    )
    if not known:
        return facts
    return {name: value for name, value in facts.items() if name in known}
