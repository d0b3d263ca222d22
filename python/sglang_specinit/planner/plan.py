"""The offline plan: the installed release's decisions for a launch (a server-args replay,
:mod:`.replay`) in, two columns out: stock (the release's own sizing) and this package's. Weight
bytes come from checkpoint headers (:mod:`.weights`) per rank (:mod:`.sharding`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from sglang_specinit.budget import DraftSpec
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
    cuda_float4_pools,
    cuda_quantization_names,
    fresh_hf_configs,
)
from sglang_specinit.planner.sharding import (
    draft_layout,
    model_layout,
    rank_vocab_table_bytes,
    sizes_on_rank,
)
from sglang_specinit.planner.target_buffers import TargetBuffers, target_buffers
from sglang_specinit.planner.weights import (
    CheckpointSizes,
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
    notes: tuple[str, ...]
    # The target's buffers no checkpoint stores, included in every column's target weights.
    target_buffers: TargetBuffers


def build_plan(
    server_args: Any, device: DeviceSpec, replay: ServerArgsReplay | None = None
) -> OfflinePlan:
    """The plans for parsed ``server_args`` on ``device`` (default replay: the installed's)."""
    with cuda_quantization_names(), fresh_hf_configs(), cuda_float4_pools(server_args):
        return _build_plan(server_args, device, replay or installed_replay())


def _build_plan(server_args: Any, device: DeviceSpec, replay: ServerArgsReplay) -> OfflinePlan:
    """Readings -> sizing inputs, the one place for every release (steps: module docstring)."""
    check_model_supported(server_args.model_path, replay)
    launch = replay.resolve(server_args, device)
    args, target_mc = launch.args, launch.target_model_config
    checks = (preflight.check_eagle3_draft, preflight.check_one_stage, preflight.check_draft_steps)
    for check in (check_resolved_launch, *checks):
        check(args)
    _check_head_split(launch, target_mc, "the target")
    layout = model_layout(args, target_mc.hf_config, launch.attn_tp_size)
    # Every pool priced by the replay (the release's own pool code where it runs it).
    prices = replay.pool_prices(launch, device)
    # The target's weight bytes on one rank (tensors it may share with a draft included).
    sizes, target_notes = sizes_on_rank(
        read_checkpoint_sizes(args.model_path), target_mc.hf_config, layout
    )
    # After pool_prices (a rope reserve reads what it published); the family from config.json,
    # which a draft's ModelConfig may have renamed in the cached config.
    architecture = read_config_json(args.model_path, "--model-path")["architectures"][0]
    buffers = target_buffers(args, target_mc, architecture)
    algorithm = args.speculative_algorithm
    draft, draft_path, target_bytes = None, args.speculative_draft_model_path, sizes.total_bytes
    draft_notes: list[str] = []
    if algorithm is not None and algorithm != "NGRAM":
        draft, draft_path, target_bytes, draft_notes = _price_draft(launch, prices, sizes)
    fraction, free = launch.new_fraction, device.pre_load_free_bytes
    # Resident at sizing: checkpoint tensors plus the target's own buffers, unless
    # --resident-bytes gives a measurement (then the budget is f x free minus it).
    readings = SizingReadings(
        pre_model_load_memory_gb=free / (1024 * MIB),
        mem_fraction_static=fraction,
        available_bytes=(
            None if device.resident_bytes is None else int(fraction * free) - device.resident_bytes
        ),
        target_kv=prices.target_kv,
        target_weight_bytes=target_bytes + buffers.bytes,
        draft=draft,
        page_size=int(args.page_size),
        context_len=int(target_mc.context_len),
        max_total_tokens=args.max_total_tokens,
        max_running_requests=args.max_running_requests,
        dp_size=launch.dp_size,
    )
    base, ours = plan_from_readings(readings, refuse_too_few=False)
    if prices.ours_plan is not None:
        ours = prices.ours_plan(base)
    preflight.check_servable(base, ours)
    preflight.check_request_length(base.context_len, ours.tokens, replay.shortest_request_tokens)
    # Stock sized by its own code, this package by its rule (a plan below one page is reported).
    stock_fraction = launch.stock_fraction
    stock_inputs = replace(base, mem_fraction_static=stock_fraction)
    reserve = None
    if stock_fraction != fraction:  # the budget a flat 4/6 GiB speculative term took (not NGRAM)
        reserve = int(fraction * free) - int(stock_fraction * free)
    return OfflinePlan(
        # Stock's resident bytes are its own (budget.resident_with_duplicates).
        stock=ReportColumn(
            f"stock {replay.release}", prices.stock_plan(stock_inputs), stock_inputs, reserve
        ),
        ours=ReportColumn("sglang-specinit", ours, base),
        release=replay.release,
        tp_size=int(args.tp_size),
        device=device,
        algorithm=algorithm,
        model_path=args.model_path,
        draft_model_path=draft_path,
        notes=(*launch.notes, *target_notes, *buffers.notes, *draft_notes),
        target_buffers=buffers,
    )


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


def _price_draft(
    launch: ResolvedLaunch, prices: PoolPrices, target: CheckpointSizes
) -> tuple[DraftSpec, str, int, list[str]]:
    """The draft of a speculative launch (not NGRAM), its checkpoint path, the target's weight
    bytes on one rank (shared tensors counted once) and the draft's notes."""
    from sglang.srt.configs.model_config import ModelConfig

    spec_args = launch.args
    algorithm = spec_args.speculative_algorithm
    draft_path = spec_args.speculative_draft_model_path
    # A runner that reserves draft layers does so only when a draft path is set.
    path_given = draft_path is not None
    notes: list[str] = []
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
    import torch

    layout = draft_layout(spec_args, algorithm, draft_mc.hf_config, launch.attn_tp_size)
    elt = torch.tensor([], dtype=draft_mc.dtype).element_size()
    draft_config = draft_mc.hf_config
    mtp_layers = int(draft_mc.num_nextn_predict_layers or 0)
    same_dir = os.path.realpath(spec_args.model_path) == os.path.realpath(draft_path)
    if algorithm == "EAGLE" and mtp_layers > 0 and same_dir:
        # An MTP draft read from the target's own checkpoint (DeepSeek-V3 / GLM NextN): its model
        # builds an embedding and an LM head of its own (never loaded; replaced by the target's).
        own_tables = rank_vocab_table_bytes(
            draft_config, elt, layout.embed_tp_size
        ) + rank_vocab_table_bytes(draft_config, elt, layout.lm_head_tp_size)
        architectures = list(getattr(draft_config, "architectures", None) or [None])
        prefixes = mtp_layer_prefixes(launch.target_model_config.hf_config, mtp_layers)
        split = split_mtp_from_target(target, prefixes, own_tables, architectures[0])
    else:
        names = shared_tensor_names(algorithm, draft_config)
        table = rank_vocab_table_bytes(draft_config, elt, layout.embed_tp_size)
        # Any other draft loads its checkpoint in full, even when it is the target's directory.
        draft, draft_notes = sizes_on_rank(read_checkpoint_sizes(draft_path), draft_config, layout)
        split = split_separate_draft(target, draft, names, {n: table for n in names})
        notes.extend(draft_notes)
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
    return spec, draft_path, split.target_bytes, [*notes, *split.notes]
