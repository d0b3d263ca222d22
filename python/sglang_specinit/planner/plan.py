"""The offline plan: a release's decisions for a launch in, two columns out: stock (the
installed release's own sizing) and this package's.

A server-args replay (:mod:`.replay`, found through :mod:`.releases`) says what the installed
release decided for the launch and what each pool costs; :func:`build_plan` turns that into the
sizing inputs for every release: the target's price (:func:`_price_target`), the draft's
(:func:`_price_draft`), both fed to ``live_sizing.plan_from_readings`` (:func:`_sizing_readings`)
and sized by stock's code and this package's rule (:func:`_offline_plan`). Weight bytes come from
checkpoint headers (:mod:`.weights`) priced per rank (:mod:`.sharding`), plus the target's rotary
cos/sin cache no checkpoint stores (:mod:`.target_buffers`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from sglang_specinit.budget import BudgetInputs, DraftSpec, KVSpec, PoolPlan
from sglang_specinit.launch_checks import check_resolved_launch
from sglang_specinit.live_sizing import SizingReadings, plan_from_readings
from sglang_specinit.model_facts import check_supported, upstream_reserved_layers
from sglang_specinit.planner import preflight
from sglang_specinit.planner.gpus import MIB, DeviceSpec
from sglang_specinit.planner.inputs import read_config_json
from sglang_specinit.planner.releases import installed_replay
from sglang_specinit.planner.replay import (
    PoolPrices,
    ResolvedLaunch,
    ServerArgsReplay,
    build_model_config,
    cuda_quantization_names,
    fresh_hf_configs,
)
from sglang_specinit.planner.sharding import (
    ShardLayout,
    draft_layout,
    model_layout,
    rank_vocab_table_bytes,
    sizes_on_rank,
)
from sglang_specinit.planner.target_buffers import TargetBuffers, target_buffers
from sglang_specinit.planner.weights import (
    WeightSplit,
    mtp_layer_prefixes,
    read_checkpoint_sizes,
    shared_tensor_names,
    split_mtp_from_target,
    split_separate_draft,
)
from sglang_specinit.report import ReportColumn


@dataclass(frozen=True)
class OfflinePlan:
    """The two columns of the report and what they were computed from."""

    # The installed release's stock sizing, by its own code (:attr:`PoolPrices.stock_plan`).
    stock: ReportColumn
    ours: ReportColumn
    # The installed release.
    release: str
    tp_size: int
    device: DeviceSpec
    algorithm: str | None
    model_path: str
    draft_model_path: str | None
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The target's buffers no checkpoint stores, included in every column's target weights.
    target_buffers: TargetBuffers = field(default_factory=lambda: TargetBuffers(0))

    @property
    def columns(self) -> tuple[ReportColumn, ReportColumn]:
        return (self.stock, self.ours)


@dataclass(frozen=True)
class _Target:
    """The target's side of a launch as the plan prices it."""

    layout: ShardLayout
    kv_dtype: str
    kv: KVSpec
    # Its checkpoint on one rank, tensors it may share with a draft included.
    weight_bytes: int
    notes: tuple[str, ...]
    # What it holds besides its checkpoint's tensors on one rank (rotary cos/sin cache).
    buffers: TargetBuffers = field(default_factory=lambda: TargetBuffers(0))


@dataclass(frozen=True)
class _Draft:
    """The draft's side of a launch as the plan prices it."""

    spec: DraftSpec
    # The checkpoint the draft is read from (the target's when no draft path was given).
    path: str
    # The target's weight bytes with the tensors it shares with the draft counted once.
    target_weight_bytes: int
    notes: tuple[str, ...]


def build_plan(
    server_args: Any, device: DeviceSpec, replay: ServerArgsReplay | None = None
) -> OfflinePlan:
    """The plans for ``server_args`` (``replay.parse_launch``'s result) on ``device``, by
    ``replay``'s server-args logic (default: the installed release's)."""
    with cuda_quantization_names(), fresh_hf_configs():
        return _build_plan(server_args, device, replay or installed_replay())


def _build_plan(server_args: Any, device: DeviceSpec, replay: ServerArgsReplay) -> OfflinePlan:
    """Readings -> sizing inputs, the one place for every release (steps: module docstring)."""
    check_model_supported(server_args.model_path, replay)
    launch = replay.resolve(server_args, device)
    target_mc = launch.target_model_config
    check_resolved_launch(launch.args)
    preflight.check_eagle3_draft(launch.args)
    preflight.check_one_stage(launch.args)
    preflight.check_draft_steps(launch.args)
    _check_head_split(launch, target_mc, "the target")
    layout = model_layout(launch.args, target_mc.hf_config, launch.attn_tp_size)
    target_kv_dtype = replay.kv_dtype(launch, target_mc, is_draft=False, target_kv_dtype=None)
    # Every pool priced by the replay (the release's own pool code where it runs it).
    prices = replay.pool_prices(launch, device)
    target = _price_target(launch, layout, target_kv_dtype, prices)
    algorithm = launch.args.speculative_algorithm
    draft = None
    if algorithm is not None and algorithm != "NGRAM":
        draft = _price_draft(launch, replay, prices, target)
    base, ours = plan_from_readings(
        _sizing_readings(launch, device, target, draft), refuse_too_few=False
    )
    if prices.ours_plan is not None:
        ours = prices.ours_plan(base)
    preflight.check_servable(base, ours)
    preflight.check_request_length(base.context_len, ours.tokens, replay.shortest_request_tokens)
    return _offline_plan(launch, device, replay, prices, target, draft, base, ours)


def check_model_supported(model_path: str, replay: Any) -> None:
    """Refuse an unsupported model from config.json alone: its ModelConfig may need more."""
    check_supported(
        read_config_json(model_path, "--model-path"),
        prices_deepseek_v4=getattr(replay, "prices_deepseek_v4", False),
        release=getattr(replay, "release", None),
    )


def _check_head_split(launch: ResolvedLaunch, model_config: Any, what: str) -> None:
    mla = getattr(getattr(model_config, "attention_arch", None), "name", None) == "MLA"
    preflight.check_head_split(
        model_config.hf_config, launch.attn_tp_size, what, mla=mla, device=launch.args.device
    )


def _price_target(
    launch: ResolvedLaunch, layout: ShardLayout, kv_dtype: str, prices: PoolPrices
) -> _Target:
    """The target's KV price per token and its weight bytes on one rank."""
    spec_args = launch.args
    target_mc = launch.target_model_config
    sizes, notes = sizes_on_rank(
        read_checkpoint_sizes(spec_args.model_path), target_mc.hf_config, layout
    )
    # After pool_prices: a replay's rope reserve reads the launch its pool pricing published.
    # The family from config.json: a draft's ModelConfig may have renamed the cached config's.
    architecture = read_config_json(spec_args.model_path, "--model-path")["architectures"][0]
    buffers = target_buffers(spec_args, target_mc, architecture)
    return _Target(
        layout, kv_dtype, prices.target_kv, sizes.total_bytes, (*notes, *buffers.notes), buffers
    )


def _price_draft(
    launch: ResolvedLaunch, replay: ServerArgsReplay, prices: PoolPrices, target: _Target
) -> _Draft:
    """The draft of a speculative launch (not NGRAM): pools, extra bytes, weights."""
    from sglang.srt.configs.model_config import ModelConfig

    spec_args = launch.args
    algorithm = spec_args.speculative_algorithm
    notes: list[str] = []
    draft_path = spec_args.speculative_draft_model_path
    # A runner that reserves draft layers does so only when a draft path is set.
    path_given = draft_path is not None
    if draft_path is None:
        # TpModelWorker falls back to the target's path (ModelConfig.from_server_args).
        draft_path = spec_args.model_path
        notes.append("no draft path: the draft is built from the target's checkpoint")
    draft_mc = build_model_config(
        ModelConfig.from_server_args,
        launch.config_source,
        model_path=draft_path,
        model_revision=spec_args.speculative_draft_model_revision,
        is_draft_model=True,
    )
    _check_head_split(launch, draft_mc, "the draft")
    layouts = (
        target.layout,
        draft_layout(spec_args, algorithm, draft_mc.hf_config, launch.attn_tp_size),
    )
    split = _weights(
        algorithm, launch.target_model_config, draft_mc, spec_args.model_path, draft_path, layouts
    )
    notes.extend(split.notes)
    spec = DraftSpec(
        algorithm=algorithm,
        kv_pools=prices.draft_pools,
        bytes_per_request=prices.draft_request_bytes,
        fixed_bytes=prices.draft_fixed_bytes,
        weight_bytes=split.draft_bytes,
        shared_weight_bytes=split.draft_shared_bytes,
        upstream_reserved_layers=(
            upstream_reserved_layers(algorithm, draft_mc) if path_given else 0
        ),
    )
    return _Draft(spec, draft_path, split.target_bytes, tuple(notes))


def _weights(
    algorithm: str,
    target_mc: Any,
    draft_mc: Any,
    model_path: str,
    draft_path: str,
    layouts: tuple[ShardLayout, ShardLayout],
) -> WeightSplit:
    """Weight bytes of target and draft on one rank, shared tensors counted once."""
    import torch

    target_layout, draft_layout = layouts
    # The target's own notes are _price_target's; only the draft's are added here.
    target, _ = sizes_on_rank(read_checkpoint_sizes(model_path), target_mc.hf_config, target_layout)
    elt = torch.tensor([], dtype=draft_mc.dtype).element_size()
    draft_config = draft_mc.hf_config
    mtp_layers = int(draft_mc.num_nextn_predict_layers or 0)
    same_dir = os.path.realpath(model_path) == os.path.realpath(draft_path)
    if algorithm == "EAGLE" and mtp_layers > 0 and same_dir:
        # An MTP draft read from the target's own checkpoint (DeepSeek-V3 / GLM NextN). Its
        # model builds an embedding and an LM head of its own whatever the checkpoint stores
        # (never loaded; replaced by the target's): the embedding on the embedding group, the
        # head on the LM-head group (``use_attn_tp_group=enable_dp_lm_head``), in its dtype.
        own_tables = rank_vocab_table_bytes(
            draft_config, elt, draft_layout.embed_tp_size
        ) + rank_vocab_table_bytes(draft_config, elt, draft_layout.lm_head_tp_size)
        architectures = list(getattr(draft_config, "architectures", None) or [None])
        return split_mtp_from_target(
            target,
            mtp_layer_prefixes(target_mc.hf_config, mtp_layers),
            own_tables,
            architectures[0],
        )
    names = shared_tensor_names(algorithm, draft_config)
    estimate = {
        n: rank_vocab_table_bytes(draft_config, elt, draft_layout.embed_tp_size) for n in names
    }
    # Any other draft loads its checkpoint in full, even when it is the target's directory.
    draft, draft_notes = sizes_on_rank(
        read_checkpoint_sizes(draft_path), draft_config, draft_layout
    )
    split = split_separate_draft(target, draft, names, estimate)
    return replace(split, notes=(*draft_notes, *split.notes))


def _sizing_readings(
    launch: ResolvedLaunch, device: DeviceSpec, target: _Target, draft: _Draft | None
) -> SizingReadings:
    """The runtime's sizing inputs, fed what the plan read instead of a live process (no free
    memory was read unless ``--resident-bytes`` gives it: then the budget is f x free minus it)."""
    fraction = launch.new_fraction
    # The checkpoint's tensors plus the buffers the target builds itself, both resident when
    # every release sizes the target pool.
    target_weight_bytes = (
        target.weight_bytes if draft is None else draft.target_weight_bytes
    ) + target.buffers.bytes
    return SizingReadings(
        pre_model_load_memory_gb=device.pre_load_free_bytes / (1024 * MIB),
        mem_fraction_static=fraction,
        available_bytes=(
            None
            if device.resident_bytes is None
            else int(fraction * device.pre_load_free_bytes) - device.resident_bytes
        ),
        target_kv=target.kv,
        target_weight_bytes=target_weight_bytes,
        draft=None if draft is None else draft.spec,
        page_size=int(launch.args.page_size),
        context_len=int(launch.target_model_config.context_len),
        max_total_tokens=launch.args.max_total_tokens,
        max_running_requests=launch.args.max_running_requests,
        dp_size=launch.dp_size,
    )


def _offline_plan(
    launch: ResolvedLaunch,
    device: DeviceSpec,
    replay: ServerArgsReplay,
    prices: PoolPrices,
    target: _Target,
    draft: _Draft | None,
    base: BudgetInputs,
    ours: PoolPlan,
) -> OfflinePlan:
    """The base inputs sized by stock's own code and this package's rule (a plan below one
    page is reported, not refused)."""
    spec_args = launch.args
    stock_fraction, new_fraction = launch.stock_fraction, launch.new_fraction
    stock_inputs = replace(base, mem_fraction_static=stock_fraction)
    reserve = None
    if stock_fraction != new_fraction:
        # The budget a flat 4/6 GiB speculative term took away (NGRAM gets none).
        reserve = int(new_fraction * device.pre_load_free_bytes) - int(
            stock_fraction * device.pre_load_free_bytes
        )
    # What stock has resident when it profiles is its own (budget.resident_with_duplicates:
    # a --resident-bytes measurement of this package's run plus the duplicates that run freed).
    stock = ReportColumn(
        f"stock {replay.release}", prices.stock_plan(stock_inputs), stock_inputs, reserve
    )
    return OfflinePlan(
        stock=stock,
        ours=ReportColumn("sglang-specinit", ours, base),
        release=replay.release,
        tp_size=int(spec_args.tp_size),
        device=device,
        algorithm=spec_args.speculative_algorithm,
        model_path=spec_args.model_path,
        draft_model_path=spec_args.speculative_draft_model_path if draft is None else draft.path,
        notes=(*target.notes, *(draft.notes if draft is not None else ())),
        target_buffers=target.buffers,
    )
