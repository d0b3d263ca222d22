"""The planner's replay for 0.5.14 / 0.5.15: 0.5.13's dataclass replay with the release's own
fraction and KV dtype, pools priced by ``pool_probe.measure_runner`` on runners without weights;
stock's column is its ``_resolve_memory_pool_config`` with the duplicates resident."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sglang_specinit.budget import (
    BudgetInputs,
    PoolPlan,
    resident_after_sizing,
    resident_with_duplicates,
)
from sglang_specinit.dataclass_args.replay import (
    FieldServerArgsReplay,
    attention_tp_size,
    auto_mem_fraction_static,
    check_kv4,
    planned_cpu_engine,
    refuse_speculative_pp,
    resolve_speculative,
    target_model_config,
)
from sglang_specinit.model_facts import kv_dtype_name
from sglang_specinit.planner.gpus import DeviceSpec
from sglang_specinit.planner.inputs import PlanError
from sglang_specinit.planner.replay import (
    InstalledReleaseReplay,
    PoolPrices,
    ResolvedLaunch,
    duplicates_note,
    installed_release,
    short_reserve_note,
)
from sglang_specinit.pool_measure import runner_token_split
from sglang_specinit.runner_sizing.unloaded_runner import (
    pricing_pools,
    reserve_draft_layers,
    runner_stock_plan,
    unloaded_draft_runner,
    unloaded_runner,
)


def refuse_swa_chunk_cap(target: Any) -> None:
    """Refuse ``SWAChunkCapPoolConfigurator``: it reads the loaded model's sliding window."""
    from sglang.srt.model_executor.pool_configurator import SWAChunkCapPoolConfigurator

    if not target.is_hybrid_swa:
        return
    # Any window: is_applicable only asks whether one exists.
    target.sliding_window_size = 1
    try:
        applies = SWAChunkCapPoolConfigurator.is_applicable(target)
    finally:
        del target.sliding_window_size
    if applies:
        raise PlanError(
            f"--disable-radix-cache on a hybrid sliding-window target: sglang "
            f"{installed_release()} caps its SWA pool by the loaded model's sliding window, "
            "which the planner does not load; plan without --disable-radix-cache"
        )


def stock_plan_0_5_14(target: Any, attn_tp_size: int, inputs: BudgetInputs) -> PoolPlan:
    """The release's own sizing on the unloaded target, profiled with what it has resident then."""
    draft = inputs.draft
    frozen = draft is not None and draft.algorithm == "FROZEN_KV_MTP"
    at_profile = inputs.target_weight_bytes if frozen else resident_with_duplicates(inputs)
    release = installed_release()
    plan = runner_stock_plan(
        target, attn_tp_size, inputs, at_profile=at_profile, resident=resident_after_sizing(inputs)
    )
    notes: list[str] = []
    if draft is not None and draft.shared_weight_bytes and not frozen:
        notes.append(duplicates_note(release))
    if draft is not None and draft.kv_bytes_per_token() > (
        plan.priced_bytes_per_token - inputs.target_kv.bytes_per_token()
    ):
        notes.append(short_reserve_note(release))
    return replace(plan, notes=tuple(notes))


class Replay0514(InstalledReleaseReplay, FieldServerArgsReplay):
    """0.5.13.x's parser and speculative hook; the release's own fraction, KV dtype and pools."""

    def resolve(self, server_args: Any, device: DeviceSpec) -> ResolvedLaunch:
        with planned_cpu_engine(server_args.device):
            target_mc = target_model_config(server_args)
            fraction = server_args.mem_fraction_static
            if fraction is None:
                fraction = auto_mem_fraction_static(server_args, device.capacity_mib)
            server_args.mem_fraction_static = float(fraction)
            spec_args = resolve_speculative(server_args)
            attn_tp = attention_tp_size(spec_args)
            # The adapter keeps stock sizing there: nothing of ours to plan.
            refuse_speculative_pp(spec_args, installed_release())
        return ResolvedLaunch(
            args=spec_args,
            config_source=spec_args,
            target_model_config=target_mc,
            # No flat speculative reserve since 0.5.14: one fraction for every column.
            stock_fraction=float(fraction),
            new_fraction=float(fraction),
            attn_tp_size=attn_tp,
            dp_size=int(spec_args.dp_size),
            mla_server_args=spec_args,
            notes=check_kv4(spec_args, installed_release()),
        )

    def kv_dtype(
        self, launch: ResolvedLaunch, model_config: Any, *, is_draft: bool, target_kv_dtype: Any
    ) -> str:
        runner = unloaded_runner(launch.args, model_config, is_draft=is_draft)
        return kv_dtype_name(runner.kv_cache_dtype)

    def pool_prices(self, launch: ResolvedLaunch, device: DeviceSpec) -> PoolPrices:
        from sglang_specinit.sglang_0_5_14 import pool_probe

        args = launch.args
        target = unloaded_runner(args, launch.target_model_config, is_draft=False)
        draft = unloaded_draft_runner(launch)
        reserve_draft_layers(target, args, None if draft is None else draft.model_config)
        refuse_swa_chunk_cap(target)
        split = runner_token_split(target)
        with pricing_pools(launch.attn_tp_size):
            target_kv = pool_probe.measure_runner(target, split)
            draft_pools = () if draft is None else (pool_probe.measure_runner(draft, split),)
        return PoolPrices(
            target_kv=target_kv,
            draft_pools=draft_pools,
            draft_fixed_bytes=0,
            stock_plan=lambda inputs: stock_plan_0_5_14(target, launch.attn_tp_size, inputs),
        )


REPLAY = Replay0514()
