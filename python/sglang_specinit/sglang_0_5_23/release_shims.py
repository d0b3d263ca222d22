"""What differs between the releases the 0.5.23 adapter serves: one row per release, read here.

Every phase module of the adapter runs on each of these releases unchanged; where a release keeps
a value elsewhere or lacks a keyword, the function below reads the installed release's row.
docs/releases.md says, per release, where SGLang keeps each thing.
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

    # runtime_context publishes the launch as bags (get_schedule / get_model / get_spec) and
    # the configurator takes kv_cache_dtype_str.
    config_bags: bool = False
    # --speculative-draft-kv-cache-dtype exists.
    draft_kv_cache_dtype: bool = False
    # _profile_available_bytes holds memory back for a multimodal target's runtime.
    mm_reservation: bool = False
    # ParallelState calls the decode context-parallel width attn_dcp_size (else dcp_size).
    attn_dcp_size_name: bool = False
    # ServerArgs keeps the caller's input and resolves into declarations (resolving_view).
    resolving_view: bool = False
    # publish derives attention widths; resolution steps read the device capacity.
    widths_at_publish: bool = False
    # No ParallelState: configurators take widths, ranks come from runtime_context.
    runtime_context_ranks: bool = False
    # SGLANG_ENABLE_PP_SPEC exists (PP + EAGLE, the draft on the last stage).
    pp_spec: bool = False
    # The configurator fuses draft pools into target entries (fused_entry_bytes).
    fused_draft_entries: bool = False
    # --enable-kv-cache-sharding exists, with arg_groups.kv_shard_hook.
    kv_cache_sharding: bool = False
    # attn_dp_size is a ServerArgs field; get_parallel() names attn_dp_enabled / num_dp_ranks.
    attention_dp_names: bool = False
    # Configurators and workers take a draft_parallel_layout.
    draft_parallel_layout: bool = False


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
        ("0.5.21", {"runtime_context_ranks": True, "pp_spec": True}),
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
    """``release``'s row (default: the installed release); a release between rows reads the
    newest row not newer than it."""
    from sglang_specinit.compat import installed_sglang_version, release_key

    version = release if release is not None else installed_sglang_version()
    if version in RELEASE_TABLE:
        return RELEASE_TABLE[version]
    key = release_key(version) if version is not None else None
    older = [r for r in RELEASE_TABLE if key is not None and release_key(r) <= key]
    return RELEASE_TABLE[older[-1]] if older else ReleaseRow()


def has_draft_parallel_layout() -> bool:
    """True on the installed release if it carries ``draft_parallel_layout`` (0.5.23)."""
    return row().draft_parallel_layout


def has_parallel_state(release: str | None = None) -> bool:
    """True on the ``ParallelState`` generation (default: the installed release)."""
    return not row(release).runtime_context_ranks


def release_requires(release: str | None = None) -> tuple[Requires, ...]:
    """What the adapter reads on ``release`` (default: the installed one) beyond its patch
    tables, in the form that release has: checked with the tables, all or nothing."""
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
    if has_resolving_view(release):  # launch_checks reads the resolved flags through it
        found.append(Requires(_OVERRIDES, "resolving_view"))
    if has_config_bags(release):  # the sizing and the probe read the schedule bag ...
        found.append(Requires(_RUNTIME_CONTEXT, "get_schedule"))
    else:  # ... or, on 0.5.16, the configurator's own ServerArgs (schedule_of)
        found.append(Requires(_KVC, "KVCacheConfigurator.server_args"))
    if row(release).mm_reservation:  # multimodal_reservation_gb reads them
        found += [
            Requires(_KVC, "mm_runtime_reservation_gb"),
            Requires(_RUNTIME_CONTEXT, "get_mm"),
        ]
    return tuple(found)


def has_config_bags(release: str | None = None) -> bool:
    """True where ``runtime_context`` publishes the configuration bags (0.5.17 on; default:
    the installed release)."""
    return row(release).config_bags


def schedule_of(kvc: Any) -> Any:
    """The schedule a configurator sizes with (``mem_fraction_static``, ``page_size``,
    ``max_total_tokens``, ``max_running_requests``, ``swa_full_tokens_ratio``, ...):
    ``get_schedule()`` from 0.5.17; on 0.5.16 the configurator's own ``server_args``, which is
    what its ``_profile_available_bytes`` / ``_apply_token_constraints`` /
    ``resolve_max_num_reqs`` read (``kv_cache_configurator.py:1538``, ``:1599``, ``:1629``)."""
    if not has_config_bags():
        return kvc.server_args
    from sglang.srt.runtime_context import get_schedule

    return get_schedule()


@contextlib.contextmanager
def scoped_schedule(kvc: Any, **fields: Any) -> Iterator[None]:
    """The schedule's ``fields`` (those it has) set for the duration: the bag's own
    ``override`` from 0.5.17; on 0.5.16 the configurator's ``ServerArgs`` fields, written the
    way ``ServerArgs.override`` writes them but without its provenance log (a probe's value,
    put back on exit, is no runtime adjustment of the launch)."""
    if has_config_bags():
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
    """(model, spec, schedule) of a published launch, as its ``ModelRunner`` reads them:
    ``get_model()`` / ``get_spec()`` / ``get_schedule()`` from 0.5.17; on 0.5.16 the
    ``ServerArgs`` fields themselves (``ModelRunner.configure_kv_cache_dtype``,
    ``model_runner.py:1082``, reads ``self.server_args``)."""
    if not has_config_bags():
        return server_args, server_args, server_args
    from sglang.srt.runtime_context import get_model, get_schedule, get_spec

    return get_model(), get_spec(), get_schedule()


def publish_launch(server_args: Any) -> None:
    """Publish an offline rank-0 scheduler's ``ServerArgs``: ``runtime_context.publish`` from
    0.5.17 (:func:`publish_kwargs`); 0.5.16's scheduler process only records it
    (``RuntimeContext.set_server_args``, ``runtime_context.py:587``, which
    ``ModelRunner.__init__`` calls through ``set_global_server_args_for_scheduler``)."""
    from sglang.srt import runtime_context

    if not has_config_bags():
        runtime_context.get_context().set_server_args(server_args)
        return
    runtime_context.publish(server_args, role="scheduler", **publish_kwargs())


def kv_cache_dtype_str_kwargs(dtype_str: str) -> dict[str, Any]:
    """The configurator's ``kv_cache_dtype_str`` keyword (0.5.17 on); 0.5.16 has no such field
    and reads ``server_args.kv_cache_dtype`` where 0.5.17 reads it."""
    return {"kv_cache_dtype_str": dtype_str} if has_config_bags() else {}


def draft_kv_own_dtype(spec_algorithm: Any) -> bool:
    """``configure_kv_cache_dtype``'s ``is_dflash`` as the installed release's ``ModelRunner``
    passes it: the DFLASH family (DFLASH, DSPARK) from 0.5.17 (``model_runner.py:1207``); 0.5.16
    passes DFLASH only (``spec_algorithm.is_dflash()``, ``model_runner.py:1091``)."""
    if has_config_bags():
        return bool(spec_algorithm.is_dflash_family())
    return bool(spec_algorithm.is_dflash())


def draft_kv_cache_dtype_kwargs(source: Any) -> dict[str, Any]:
    """``configure_kv_cache_dtype``'s draft-dtype keyword, read from ``source`` (the flags or
    ``get_spec()``), where the installed release has it (0.5.18 on; 0.5.17 has no such flag:
    the draft's KV dtype is the target's rule)."""
    if not row().draft_kv_cache_dtype:
        return {}
    return {"speculative_draft_kv_cache_dtype": source.speculative_draft_kv_cache_dtype}


def multimodal_reservation_gb() -> float:
    """What the installed release's ``_profile_available_bytes`` holds back for a multimodal
    target's runtime: ``mm_runtime_reservation_gb`` from 0.5.18; 0.5.17 reserves nothing
    (its ``_profile_available_bytes``, ``kv_cache_configurator.py:1614``, has no such term)."""
    if not row().mm_reservation:
        return 0.0
    from sglang.srt.mem_cache.kv_cache_configurator import mm_runtime_reservation_gb
    from sglang.srt.runtime_context import get_mm

    return float(
        mm_runtime_reservation_gb(
            is_multimodal=True, mm_feature_transport=get_mm().mm_feature_transport
        )
    )


def has_resolving_view(release: str | None = None) -> bool:
    """True where ``ServerArgs`` resolves into declarations read through
    ``arg_groups.overrides.resolving_view`` (0.5.19 on); before, the resolved values are the
    fields themselves (default: the installed release)."""
    return row(release).resolving_view


def init_kv_cache_configurator(runner: Any, draft_parallel_layout: Any = None) -> None:
    """``runner.init_kv_cache_configurator`` as the installed release takes it (before 0.5.23
    no layout: the draft shares the target's attention TP, so there is none to pass)."""
    if has_draft_parallel_layout():
        runner.init_kv_cache_configurator(draft_parallel_layout)
    else:
        runner.init_kv_cache_configurator()


def configurator_layout_kwargs(draft_parallel_layout: Any = None) -> dict[str, Any]:
    """The ``KVCacheConfigurator`` keyword for the layout on 0.5.23; none before."""
    if has_draft_parallel_layout():
        return {"draft_parallel_layout": draft_parallel_layout}
    return {}


def attn_dp_size(kvc: Any) -> int:
    """A configurator's attention-DP width (``kvc.ps.attn_dp_size`` before 0.5.21)."""
    return int(kvc.ps.attn_dp_size if has_parallel_state() else kvc.attn_dp_size)


def fused_entry_bytes(kvc: Any, sub_pool: str) -> int | None:
    """``kvc.fused_entry_bytes(sub_pool)``; None before 0.5.22, which fuses no draft pools."""
    if row().fused_draft_entries:
        return kvc.fused_entry_bytes(sub_pool)
    return None


def pp_spec_enabled() -> bool:
    """``SGLANG_ENABLE_PP_SPEC`` as the installed release reads it; False before 0.5.21,
    which has no such switch."""
    if not row().pp_spec:
        return False
    from sglang.srt.environ import envs

    return bool(envs.SGLANG_ENABLE_PP_SPEC.get())


def fused_host_names() -> tuple[str, ...]:
    """The target sub-pools a draft may fuse into: 0.5.23's ``HOST_KINDS`` registry
    (``mem_cache/layout/fused_draft.py:284``); 0.5.22 fuses into the full-attention one only
    (its ``fused_entry_bytes`` answers None for any other); none before."""
    if not row().fused_draft_entries:
        return ()
    try:
        from sglang.srt.mem_cache.layout.fused_draft import HOST_KINDS
    except ImportError:  # 0.5.22
        return ("full",)
    return tuple(HOST_KINDS)


def kv_cache_sharding(server_args: Any) -> bool:
    """``--enable-kv-cache-sharding``; False before 0.5.22, which has no such flag."""
    return bool(server_args.enable_kv_cache_sharding) if row().kv_cache_sharding else False


def has_attention_dp_names(release: str | None = None) -> bool:
    """True where ``get_parallel()`` answers ``attn_dp_enabled`` / ``num_dp_ranks`` and
    ``attn_dp_size`` is a ServerArgs field (0.5.22 on; default: the installed release)."""
    return row(release).attention_dp_names


def scheduler_ranks(scheduler: Any) -> Any:
    """This scheduler's ranks and widths: ``get_parallel()`` from 0.5.22; on 0.5.21 the same
    with the two names 0.5.22 added (``attn_dp_enabled`` is 0.5.21's ``enable_dp_attention``,
    ``num_dp_ranks`` its ``dp_size``: ``runtime_context.py:77`` derives ``attn_dp_size`` from
    them, ``:2122`` counts DP ranks by ``dp_size``); before, an object with the same names read
    from the scheduler's own ``ParallelState`` (0.5.20 builds it in ``Scheduler.__init__``;
    ``attn_dp_enabled`` is its ``enable_dp_attention``)."""
    from types import SimpleNamespace

    if not has_parallel_state():
        from sglang.srt.runtime_context import get_parallel

        parallel = get_parallel()
        if has_attention_dp_names():
            return parallel
        names = ("dp_rank", "pp_rank", "tp_rank", "attn_dp_rank", "attn_tp_rank")
        names += ("pp_size", "tp_size", "attn_tp_size")
        return SimpleNamespace(
            **{name: getattr(parallel, name) for name in names},
            attn_dp_enabled=bool(parallel.enable_dp_attention),
            num_dp_ranks=int(parallel.dp_size),
        )
    ps = scheduler.ps
    return SimpleNamespace(
        attn_dp_enabled=bool(scheduler.enable_dp_attention),
        dp_rank=ps.dp_rank,
        pp_rank=ps.pp_rank,
        tp_rank=ps.tp_rank,
        attn_dp_rank=ps.attn_dp_rank,
        attn_tp_rank=ps.attn_tp_rank,
        pp_size=ps.pp_size,
        tp_size=ps.tp_size,
        attn_tp_size=ps.attn_tp_size,
        num_dp_ranks=ps.dp_size,
    )


def configurator_parallel_kwargs(server_args: Any) -> dict[str, Any]:
    """The parallel keywords of an offline rank-0 ``KVCacheConfigurator`` (the planner's) for
    the published ``server_args``: ``attn_dp_size`` / ``pp_size`` from 0.5.21, else a rank-0
    ``ParallelState`` with the published widths (as ``Scheduler.__init__`` builds it, 0.5.20
    ``scheduler.py:523``; 0.5.16's ``get_parallel()`` has no ``dp_size`` / ``ep_size``: its
    scheduler takes them from the args, ``scheduler.py:379-398``)."""
    from sglang.srt.runtime_context import get_parallel

    parallel = get_parallel()
    if not has_parallel_state():
        return {"attn_dp_size": parallel.attn_dp_size, "pp_size": 1}
    from sglang.srt.distributed.parallel_state_wrapper import ParallelState

    flags = parallel if has_config_bags() else server_args
    return {
        "ps": ParallelState.trivial(
            tp_size=parallel.tp_size,
            dp_size=flags.dp_size,
            attn_tp_size=parallel.attn_tp_size,
            attn_cp_size=parallel.attn_cp_size,
            # 0.5.17's ParallelState calls it dcp_size.
            **{
                "attn_dcp_size" if row().attn_dcp_size_name else "dcp_size": (
                    parallel.dcp_size
                )
            },
            attn_dp_size=parallel.attn_dp_size,
            moe_ep_size=flags.ep_size,
            moe_dp_size=parallel.moe_dp_size,
        )
    }


def resolve_layer_info(model_config: Any, *, is_draft: bool, spec_algorithm: Any, **kw: Any) -> Any:
    """``layer_setup.resolve_layer_indices`` for a runner without weights, as the installed
    release's ``ModelRunner`` calls it (0.5.20: by ``spec_algorithm``, then
    ``adjust_hybrid_swa_layer_ids`` on the config; from 0.5.21 by ``draft_model_idx``)."""
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
    """The full-attention layer ids a configurator's SWA split counts (0.5.20 keeps them on
    the runner's model config, adjusted to its layer slice, and only for hybrid-SWA models;
    from 0.5.21 on its layer info)."""
    if has_parallel_state():
        return getattr(kvc.model_config, "full_attention_layer_ids", None)
    return kvc.layer_info.full_attention_layer_ids


def publish_kwargs() -> dict[str, Any]:
    """``runtime_context.publish``'s rank keyword for an offline rank-0 scheduler (none before
    0.5.21: ranks come from the process groups there)."""
    if has_parallel_state():
        return {}
    from sglang.srt import runtime_context

    return {"ranks": runtime_context.SpawnRanks(0, None, 0)}


# What derived_server_arg answers for a name the installed release stores as a field.
NOT_DERIVED = object()


def derived_server_arg(view: Any, name: str) -> Any:
    """The attention-DP field the planner reads under a name the installed release derives
    rather than stores: ``attn_dp_size`` before 0.5.22 (``runtime_context.attn_dp_size_of``),
    ``enable_dp_attention`` from 0.5.22 (``attn_dp_enabled_of``); :data:`NOT_DERIVED` for any
    other name (read it from the record)."""
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
    """(attn_dp_size, attn_tp_size) of a config with 0.5.19's leaves, by 0.5.19's own
    arithmetic (``runtime_context.derive_attention_widths``, which its scheduler's
    ``compute_dp_attention_world_info`` also uses)."""
    from sglang.srt import runtime_context

    attn_dp, attn_tp = runtime_context.derive_attention_widths(
        tp_size=int(view.tp_size),
        attn_cp_size=int(view.attn_cp_size),
        dp_size=int(view.dp_size),
        enable_dp_attention=bool(view.enable_dp_attention),
    )
    return int(attn_dp), int(attn_tp)


def attn_tp_size_of(view: Any) -> int:
    """A resolved config's attention-TP width (``runtime_context.attn_tp_size_of`` from
    0.5.20; 0.5.19 derives it from the leaves: :func:`_attention_widths`)."""
    from sglang.srt import runtime_context

    if row().widths_at_publish:
        return int(runtime_context.attn_tp_size_of(view))
    return _attention_widths(view)[1]


def stamp_published_widths() -> None:
    """After an offline ``publish``, the derived widths the pool code reads off
    ``get_parallel()`` (``attn_tp_size``, ``attn_dcp_size``, ...): from 0.5.20 ``publish``
    computes them; 0.5.19 has them only once ``initialize_model_parallel`` stamps them when a
    server builds its process groups, from its scheduler's ``ParallelState`` widths
    (``distributed/bootstrap.py:100-115``, ``parallel_state.py:2517-2525``, ``:2737``). The
    same stamp, from the same leaves, for the planner's rank 0 (no groups)."""
    if row().widths_at_publish or not has_resolving_view():
        # 0.5.18 derives no widths from the record at all: its get_parallel() reads the live
        # groups or its override, which the planner sets (dataclass_replay.rank0_widths).
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
            # initialize_model_parallel builds the DCP group only for more than one rank.
            dcp_enabled=dcp > 1,
        )
    )


def present_capacity_readers(names: tuple[str, ...]) -> tuple[str, ...]:
    """The resolution modules of ``names`` the installed release has (``kv_shard_hook`` from
    0.5.22); before 0.5.20 none of them reads the capacity: the resolution pipeline does and
    hands it to the memory step (0.5.19 ``arg_groups/pipeline.py:223``)."""
    if not row().widths_at_publish:
        return (PIPELINE_CAPACITY_READER,)
    if row().kv_cache_sharding:
        return names
    return tuple(name for name in names if name != KV_SHARD_HOOK)


def known_platform_facts(facts: dict[str, Any]) -> dict[str, Any]:
    """``facts`` without the ones the installed release's ``runtime_context.override_platform``
    does not know (it refuses unknown names). 0.5.20 and 0.5.21 have no ``is_mps`` and no
    ``is_sm110`` (0.5.22 ``runtime_context.py:1830,1834``): no code of theirs can read those,
    so leaving them out changes no answer. The known names are read from SGLang's own tables."""
    from sglang.srt import runtime_context

    known = set(getattr(runtime_context, "_PLATFORM_PROBES", ())) | set(
        getattr(runtime_context, "_PLATFORM_VALUES", ())
    )
    if not known:
        return facts
    return {name: value for name, value in facts.items() if name in known}
