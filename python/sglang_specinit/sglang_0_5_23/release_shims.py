"""Where the releases this adapter serves differ: every such difference is decided here, once.

The adapter was written for sglang 0.5.23 and serves two internal API generations with it:

* the ``runtime_context`` generation, 0.5.21, 0.5.22 and 0.5.23: configurators carry their
  parallel widths as fields, ranks are read from ``runtime_context.get_parallel()``;
* the ``ParallelState`` generation, 0.5.16 - 0.5.20: each scheduler and model runner holds a
  ``distributed.parallel_state_wrapper.ParallelState`` (``ps``) with its ranks and widths, and
  the configurator takes that object.

Read from the wheels (0.5.20 vs 0.5.22): every method the adapter hooks has the same
signature, and the bodies of the hooked ones (``Scheduler.init_memory_pools``,
``KVCacheConfigurator._resolve_memory_pool_config`` / ``config_from_budget``, the drafts'
``init_token_map`` / ``init_lm_head`` / ``alloc_memory_pool``) do the same steps in the same
order. What differs, and what the adapter reads through this module instead::

    difference                      ParallelState gen. (0.5.20)        runtime_context gen.
    configurator's parallel widths  ``ps: ParallelState`` field        ``attn_dp_size``,
                                    (mem_cache/kv_cache_configurator   ``pp_size`` fields
                                    .py:250)                           (0.5.22 :304-305)
    this scheduler's ranks          ``Scheduler.ps`` (managers/        ``get_parallel()``
                                    scheduler.py:523)                  (runtime_context)
    fused draft pool entries        none: no ``fused_entry_bytes``     ``KVCacheConfigurator.
                                    (0.5.21 has none either)           fused_entry_bytes``
                                                                       (0.5.22 :1150)
    ``--enable-kv-cache-sharding``  no such flag                       0.5.22+
    draft layer indices             ``resolve_layer_indices(...,       ``(...,
                                    spec_algorithm)`` then             draft_model_idx)``
                                    ``adjust_hybrid_swa_layer_ids``    (0.5.22 layer_setup
                                    (0.5.20 model_runner.py:679-690)   .py:140)
    ``runtime_context.publish``     no ranks (``runtime_context.py:    ``ranks=SpawnRanks``
                                    1571``; ranks come from the
                                    process groups)
    a runner's full-attention       ``model_config.full_attention_    ``layer_info.full_
    layer ids (the SWA split)       layer_ids`` (``pool_configurator  attention_layer_ids``
                                    .py:566``)                         (0.5.22 ``:643``)
    ``draft_parallel_layout``       none                               0.5.23 only (below)

and, read by the offline planner (``sglang_0_5_23/planner_replay.py``) only::

    attention DP in ``ServerArgs``  ``enable_dp_attention`` + ``dp_    an ``attn_dp_size``
                                    size`` fields; ``runtime_context  field (0.5.22+);
                                    .attn_dp_size_of`` (``:220``)      ``attn_dp_enabled_of``
    a resolution step reading the   ``memory_hook``, ``model_overrides  also ``kv_shard_hook``
    device's capacity               /qwen3_vl``                         (0.5.22+)

0.5.19 against 0.5.20, read from both wheels: the live adapter reads nothing that differs
(every hooked body identical but for an assert 0.5.20 adds to ``config_from_budget``, every
required attribute present). Three reads of the planner differ, all in ``runtime_context``::

    difference                      0.5.19                             0.5.20
    attention widths of a config    ``derive_attention_widths(tp_size= ``attn_tp_size_of`` /
                                    , attn_cp_size=, dp_size=, enable_ ``attn_dp_size_of``
                                    dp_attention=)`` (``runtime_       (``:215``, ``:220``;
                                    context.py:134``)                  same arithmetic, ``:138``)
    derived widths after publish    none until the process groups are  computed at publish
                                    built: ``initialize_model_parallel (``_derived_width``,
                                    `` stamps them (``distributed/     ``:313``)
                                    parallel_state.py:2517,2737``)
    a resolution step reading the   ``arg_groups/pipeline.py:223``     ``memory_hook``,
    device's capacity               (bound ``:23``, handed to          ``model_overrides/
                                    ``handle_gpu_memory_settings``)    qwen3_vl``

0.5.18 against 0.5.19, read from both wheels: the KV side is the same (``KVCacheConfigurator(ps:
ParallelState)`` ``mem_cache/kv_cache_configurator.py:215``, ``Scheduler.init_memory_pools``
``managers/scheduler.py:966`` = 0.5.20's body, ``mm_runtime_reservation_gb`` ``:130``), every
hooked signature and required attribute present; ``ServerArgs`` is 0.5.15's dataclass::

    difference                      0.5.18                             0.5.19
    the resolved flags the launch   the fields: ``__post_init__``      ``arg_groups.overrides.
    checks read                     resolves and ends with ``material  resolving_view``
                                    ize_declarations`` (``server_args  (:func:`has_resolving_view`,
                                    .py:3585``, ``:3788``) before      a ``release_requires`` row)
                                    ``check_server_args`` (``:9136``)
    the planner's resolution        ``_handle_gpu_memory_settings``,   ``resolve_once``
                                    ``speculative_hook`` on an inert   (``planner_replay``)
                                    dataclass (``dataclass_replay``)
    widths ``get_parallel()``       live groups or its ``override``    stamped after publish
    answers offline                 (``runtime_context.py:158``):      (:func:`stamp_published_
                                    ``dataclass_replay.rank0_widths``  widths`)

0.5.17 against 0.5.18: the same generation and the same dataclass ``ServerArgs``; it lacks what
0.5.18 added in three places::

    difference                      0.5.17                             0.5.18
    multimodal runtime reservation  none (``_profile_available_       ``mm_runtime_reservation_
                                    bytes``, ``kv_cache_configurator  gb`` (``:130``)
                                    .py:1614``)
    draft KV cache dtype            no flag, no keyword (``kv_cache_   ``--speculative-draft-kv-
                                    dtype.py:22``)                     cache-dtype``
    the DCP width in ParallelState  ``dcp_size`` (``parallel_state_    ``attn_dcp_size``
                                    wrapper.py:27``)

0.5.16 against 0.5.17: the same generation, KV side and dataclass ``ServerArgs``; what 0.5.16
lacks is the published configuration bags (and the configurator's KV dtype string; its runner
counts only DFLASH as a draft with a KV dtype of its own)::

    difference                      0.5.16                             0.5.17
    the schedule the configurator   its own ``server_args`` (``kv_     ``runtime_context.get_
    sizes with (fraction, page,     cache_configurator.py:1538``,      schedule()`` (``:1107``)
    caps, SWA ratio, mamba size)    ``:1599``, ``:1629``, ``:1661``)
    publishing a launch             ``RuntimeContext.set_server_args`` ``runtime_context.publish``
                                    (``runtime_context.py:587``; only  (``:1271``) and the
                                    ``get_server_args`` reads it)      ``get_model`` / ``get_spec``
                                                                       bags
    the configurator's KV dtype     no ``kv_cache_dtype_str`` field    ``kv_cache_dtype_str``
    string                          (``:155-183``: it reads ``server_  (``:200``)
                                    args.kv_cache_dtype``)
    drafts with a KV dtype of their DFLASH only (``model_runner.py:    the DFLASH family
    own (``is_dflash``)             1091``)                            (``:1207``)

0.5.21 against 0.5.22, read from both wheels: the hooked bodies are identical, every required
attribute and every method the phases call exists with the same signature; 0.5.21 lacks what
0.5.22 added in three places, and there has the ParallelState generation's form::

    difference                      0.5.21                             0.5.22
    fused draft pool entries        no ``fused_entry_bytes`` (no       ``KVCacheConfigurator.
                                    fused drafts: ``kv_cache_          fused_entry_bytes``
                                    configurator.py:259-2571``)        (``:1150``)
    ``--enable-kv-cache-sharding``  no such field                      ``arg_groups/fields/
                                                                       parallel.py:184``
    attention DP                    ``enable_dp_attention`` and        an ``attn_dp_size`` field
                                    ``dp_size`` fields (``fields/      (``fields/parallel.py:81``);
                                    parallel.py:163``, ``:73``);       ``get_parallel()`` names
                                    ``attn_dp_size`` derived at        ``attn_dp_enabled``,
                                    publish (``:285``, ``runtime_      ``num_dp_ranks`` (``:310``,
                                    context.py:203``)                  ``:317``)

and, 0.5.23 only: ``ModelRunner.init_kv_cache_configurator(self, draft_parallel_layout=None)``
(``model_executor/model_runner.py:650``; 0.5.22 ``:643`` takes none), the configurator's
``draft_parallel_layout`` field (``kv_cache_configurator.py:346``) and the speculative
worker's. Without a layout an EAGLE3 draft under attention DP runs on the target's
attention-TP group (``draft_owns_attention``, 0.5.22 ``speculative/spec_utils.py:766``;
0.5.20's ``draft_tp_context(tp_group)``, ``spec_utils.py:689``), so its attention TP is the
target's; ``launch_policy`` reads the worker's layout with ``getattr(..., None)``.

Each difference is keyed by the first release that has the newer form (``*_SINCE``); what the
adapter must find on the installed release besides its patch tables is
:func:`release_requires` (checked with them, all or nothing: ``hooks.adapter_patches``).
``test/sglang_0_5_20`` and ``test/sglang_0_5_22`` check every row on the real wheels.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import cache
from typing import Any

from sglang_specinit.hooks import Requires

# The first release whose configurators and workers carry ``draft_parallel_layout``.
DRAFT_PARALLEL_LAYOUT_SINCE = (0, 5, 23)
# The first release whose configurator has fused draft pool entries (``fused_entry_bytes``)
# and the ``--enable-kv-cache-sharding`` flag.
FUSED_ENTRIES_SINCE = (0, 5, 22)
KV_CACHE_SHARDING_SINCE = (0, 5, 22)
# The first release whose ServerArgs carry ``attn_dp_size`` (``enable_dp_attention`` deprecated)
# and whose resolution has ``arg_groups/kv_shard_hook.py``; its ``get_parallel()`` also names
# ``attn_dp_enabled`` / ``num_dp_ranks`` (0.5.21 derives ``attn_dp_size`` at publish).
ATTN_DP_SIZE_FIELD_SINCE = (0, 5, 22)
KV_SHARD_HOOK = "sglang.srt.arg_groups.kv_shard_hook"
# The first release whose ``runtime_context`` reads attention widths off a config
# (``attn_tp_size_of`` / ``attn_dp_size_of``), computes the derived widths at publish, and whose
# resolution steps (not the pipeline) read the device's capacity.
WIDTHS_AT_PUBLISH_SINCE = (0, 5, 20)
PIPELINE_CAPACITY_READER = "sglang.srt.arg_groups.pipeline"
# The first release whose ``_profile_available_bytes`` reserves memory for a multimodal
# target's runtime (``mem_cache.kv_cache_configurator.mm_runtime_reservation_gb``).
MM_RESERVATION_SINCE = (0, 5, 18)
# The first release with ``--speculative-draft-kv-cache-dtype`` (the field, the ``get_spec()``
# leaf and ``configure_kv_cache_dtype``'s keyword) and whose ``ParallelState`` names the decode
# context-parallel width ``attn_dcp_size`` (0.5.17: ``dcp_size``,
# ``distributed/parallel_state_wrapper.py:27``).
DRAFT_KV_CACHE_DTYPE_SINCE = (0, 5, 18)
ATTN_DCP_SIZE_NAME_SINCE = (0, 5, 18)
_RUNTIME_CONTEXT = "sglang.srt.runtime_context"
# The first release whose ``runtime_context`` publishes a launch's configuration as bags
# (``publish``; ``get_schedule`` / ``get_model`` / ``get_spec``) and whose configurator has a
# ``kv_cache_dtype_str`` field; 0.5.16 records the ``ServerArgs`` itself
# (``RuntimeContext.set_server_args``, ``runtime_context.py:587``) and its configurator reads
# ``self.server_args``.
CONFIG_BAGS_SINCE = (0, 5, 17)
# The first release whose ``ServerArgs`` keeps the caller's input in its fields and what
# resolution decided in declarations (``resolve_once``, ``arg_groups.overrides.resolving_view``);
# before, 0.5.15's dataclass whose ``__post_init__`` resolves into the fields (0.5.18).
RESOLVING_VIEW_SINCE = (0, 5, 19)
# The first release without ``ParallelState``: configurators take widths, schedulers read
# their ranks from ``runtime_context``, ``publish`` takes ``SpawnRanks``.
RUNTIME_CONTEXT_RANKS_SINCE = (0, 5, 21)
# The first release with ``SGLANG_ENABLE_PP_SPEC`` (``environ.py``; 0.5.21 ``:1372``): PP +
# EAGLE outside PD prefill, the draft on the last stage only (``managers/scheduler.py:1012-1021``).
# Before, PP + speculative runs only on NPU prefill nodes (0.5.20 ``arg_groups/
# validation_hook.py:62-81``), where every stage builds the draft.
PP_SPEC_SINCE = (0, 5, 21)

_KVC = "sglang.srt.mem_cache.kv_cache_configurator"
_PARALLEL_STATE = "sglang.srt.distributed.parallel_state_wrapper"
_LAYER_SETUP = "sglang.srt.model_executor.model_runner_components.layer_setup"
_OVERRIDES = "sglang.srt.arg_groups.overrides"


def _key(release: str | None) -> tuple[int, int, int] | None:
    from sglang_specinit.compat import installed_sglang_version, release_key

    version = release if release is not None else installed_sglang_version()
    key = release_key(version) if version is not None else None
    return key[:3] if key is not None else None


@cache
def _since(first: tuple[int, int, int], release: str | None = None) -> bool:
    key = _key(release)
    return key is not None and key >= first


def has_draft_parallel_layout() -> bool:
    """True on the installed release if it carries ``draft_parallel_layout`` (0.5.23)."""
    return _since(DRAFT_PARALLEL_LAYOUT_SINCE)


def has_parallel_state(release: str | None = None) -> bool:
    """True on the ``ParallelState`` generation (default: the installed release)."""
    return not _since(RUNTIME_CONTEXT_RANKS_SINCE, release)


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
    if _since(FUSED_ENTRIES_SINCE, release):
        found.append(Requires(_KVC, "KVCacheConfigurator.fused_entry_bytes"))
    if has_resolving_view(release):  # launch_checks reads the resolved flags through it
        found.append(Requires(_OVERRIDES, "resolving_view"))
    if has_config_bags(release):  # the sizing and the probe read the schedule bag ...
        found.append(Requires(_RUNTIME_CONTEXT, "get_schedule"))
    else:  # ... or, on 0.5.16, the configurator's own ServerArgs (schedule_of)
        found.append(Requires(_KVC, "KVCacheConfigurator.server_args"))
    if _since(MM_RESERVATION_SINCE, release):  # multimodal_reservation_gb reads them
        found += [
            Requires(_KVC, "mm_runtime_reservation_gb"),
            Requires(_RUNTIME_CONTEXT, "get_mm"),
        ]
    return tuple(found)


def has_config_bags(release: str | None = None) -> bool:
    """True where ``runtime_context`` publishes the configuration bags (0.5.17 on; default:
    the installed release)."""
    return _since(CONFIG_BAGS_SINCE, release)


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
    if not _since(DRAFT_KV_CACHE_DTYPE_SINCE):
        return {}
    return {"speculative_draft_kv_cache_dtype": source.speculative_draft_kv_cache_dtype}


def multimodal_reservation_gb() -> float:
    """What the installed release's ``_profile_available_bytes`` holds back for a multimodal
    target's runtime: ``mm_runtime_reservation_gb`` from 0.5.18; 0.5.17 reserves nothing
    (its ``_profile_available_bytes``, ``kv_cache_configurator.py:1614``, has no such term)."""
    if not _since(MM_RESERVATION_SINCE):
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
    return _since(RESOLVING_VIEW_SINCE, release)


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
    if _since(FUSED_ENTRIES_SINCE):
        return kvc.fused_entry_bytes(sub_pool)
    return None


def pp_spec_enabled() -> bool:
    """``SGLANG_ENABLE_PP_SPEC`` as the installed release reads it; False before 0.5.21,
    which has no such switch."""
    if not _since(PP_SPEC_SINCE):
        return False
    from sglang.srt.environ import envs

    return bool(envs.SGLANG_ENABLE_PP_SPEC.get())


def fused_host_names() -> tuple[str, ...]:
    """The target sub-pools a draft may fuse into: 0.5.23's ``HOST_KINDS`` registry
    (``mem_cache/layout/fused_draft.py:284``); 0.5.22 fuses into the full-attention one only
    (its ``fused_entry_bytes`` answers None for any other); none before."""
    if not _since(FUSED_ENTRIES_SINCE):
        return ()
    try:
        from sglang.srt.mem_cache.layout.fused_draft import HOST_KINDS
    except ImportError:  # 0.5.22
        return ("full",)
    return tuple(HOST_KINDS)


def kv_cache_sharding(server_args: Any) -> bool:
    """``--enable-kv-cache-sharding``; False before 0.5.22, which has no such flag."""
    return bool(server_args.enable_kv_cache_sharding) if _since(KV_CACHE_SHARDING_SINCE) else False


def has_attention_dp_names(release: str | None = None) -> bool:
    """True where ``get_parallel()`` answers ``attn_dp_enabled`` / ``num_dp_ranks`` and
    ``attn_dp_size`` is a ServerArgs field (0.5.22 on; default: the installed release)."""
    return _since(ATTN_DP_SIZE_FIELD_SINCE, release)


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
                "attn_dcp_size" if _since(ATTN_DCP_SIZE_NAME_SINCE) else "dcp_size": (
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

    if _since(ATTN_DP_SIZE_FIELD_SINCE):
        if name == "enable_dp_attention":
            return runtime_context.attn_dp_enabled_of(view)
    elif name == "attn_dp_size":
        if _since(WIDTHS_AT_PUBLISH_SINCE):
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

    if _since(WIDTHS_AT_PUBLISH_SINCE):
        return int(runtime_context.attn_tp_size_of(view))
    return _attention_widths(view)[1]


def stamp_published_widths() -> None:
    """After an offline ``publish``, the derived widths the pool code reads off
    ``get_parallel()`` (``attn_tp_size``, ``attn_dcp_size``, ...): from 0.5.20 ``publish``
    computes them; 0.5.19 has them only once ``initialize_model_parallel`` stamps them when a
    server builds its process groups, from its scheduler's ``ParallelState`` widths
    (``distributed/bootstrap.py:100-115``, ``parallel_state.py:2517-2525``, ``:2737``). The
    same stamp, from the same leaves, for the planner's rank 0 (no groups)."""
    if _since(WIDTHS_AT_PUBLISH_SINCE) or not has_resolving_view():
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
    if not _since(WIDTHS_AT_PUBLISH_SINCE):
        return (PIPELINE_CAPACITY_READER,)
    if _since(KV_CACHE_SHARDING_SINCE):
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
