"""The planner's replay for 0.5.14 / 0.5.15: 0.5.13's dataclass ``ServerArgs`` replay
(:class:`FieldServerArgsReplay`) with the release's own fraction heuristic and KV dtype, every
pool priced by the live adapter's ``pool_probe.measure_runner`` on runners built without weights.
The stock column is the release's own ``_resolve_memory_pool_config`` on the unloaded target,
with both models and the draft's duplicate embed/lm_head resident at profiling.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sglang_specinit.budget import (
    BudgetInputs,
    PoolPlan,
    make_plan,
    resident_after_sizing,
    resident_with_duplicates,
    static_budget_bytes,
)
from sglang_specinit.model_facts import (
    kv_dtype_name,
    upstream_reserved_layers,
)
from sglang_specinit.planner.columns import StockBeside
from sglang_specinit.planner.field_replay import (
    FieldServerArgsReplay,
    attention_tp_size,
    auto_mem_fraction_static,
    planned_cpu_engine,
    refuse_speculative_pp,
    resolve_speculative,
    target_model_config,
)
from sglang_specinit.planner.gpus import DeviceSpec
from sglang_specinit.planner.inputs import PlanError
from sglang_specinit.planner.plan import OfflinePlan
from sglang_specinit.planner.replay import (
    InstalledReleaseReplay,
    ModelledColumn,
    PoolPrices,
    ResolvedLaunch,
    build_model_config,
    installed_release,
    released,
)
from sglang_specinit.planner.unloaded_runner import (
    attention_tp_size_answering,
    kv_warm_up_copy_skipped,
    pricing_device,
    unloaded_runner,
)


def reserve_draft_layers(target: Any, server_args: Any, draft_mc: Any) -> None:
    """The draft reserve the target runner's ``__init__`` reads off the draft's config, which
    stock scales the target cell by."""
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

    algorithm = target.spec_algorithm
    target.eagle_draft_num_layers = None
    target.dflash_draft_num_layers = None
    if draft_mc is None:
        return
    if (algorithm.is_eagle() or algorithm.is_standalone()) and (
        server_args.speculative_draft_model_path
    ):
        target.eagle_draft_num_layers = upstream_reserved_layers(
            str(server_args.speculative_algorithm), draft_mc
        )
    if algorithm.is_dflash():
        config = parse_dflash_draft_config(draft_hf_config=draft_mc.hf_config)
        target.dflash_draft_num_layers = int(config.require_num_layers())


@contextlib.contextmanager
def profiled_as(runner: Any, available_bytes: int) -> Iterator[None]:
    runner._profile_available_bytes = lambda _pre_model_load_memory: available_bytes
    try:
        yield
    finally:
        del runner._profile_available_bytes


def refuse_swa_chunk_cap(target: Any) -> None:
    """``SWAChunkCapPoolConfigurator`` sizes from the loaded model's sliding window, which a
    runner without weights lacks."""
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
    """The release's own sizing on the unloaded target, profiled with what it has resident
    then; a budget below one page is 0 tokens, not refused."""
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    draft = inputs.draft
    if draft is not None and draft.algorithm == "FROZEN_KV_MTP":
        at_profile = inputs.target_weight_bytes  # the draft loads after the target's pool
    else:
        at_profile = resident_with_duplicates(inputs)
    available = static_budget_bytes(inputs) - at_profile - inputs.reserved_bytes
    release = installed_release()
    with attention_tp_size_answering(attn_tp_size):
        configurator = create_memory_pool_configurator(target)
        cell = float(configurator._cell_size)
        tokens = 0
        # Below one page the release refuses to start (MemoryPoolConfig): the plan reports it.
        if available > 0 and available // cell >= inputs.page_size:
            with profiled_as(target, available):
                config = released(ModelRunner._resolve_memory_pool_config)(target, 0)
            tokens = int(config.max_total_num_tokens)

    def max_requests(n: int, *_: Any) -> int:
        return int(released(ModelRunner._resolve_max_num_reqs)(target, n))

    notes: list[str] = []
    if draft is not None and draft.shared_weight_bytes and draft.algorithm != "FROZEN_KV_MTP":
        notes.append(f"{release} profiles while the draft's duplicate embed/lm_head are resident")
    if draft is not None and draft.kv_bytes_per_token() > cell - inputs.target_kv.bytes_per_token():
        notes.append(f"{release} reserves less draft KV per token than the draft allocates")
    return make_plan(
        f"stock-{release}",
        inputs,
        tokens,
        resident_after_sizing(inputs),
        cell,
        (at_profile + inputs.reserved_bytes) / inputs.pre_load_free_bytes,
        tuple(notes),
        derive_max_reqs=max_requests,
    )


class Replay0514(InstalledReleaseReplay, FieldServerArgsReplay):
    modelled_columns = (
        ModelledColumn("0.5.13.post1", "stock 0.5.13.post1", "stock_0_5_13", fraction="stock"),
        ModelledColumn("0.5.14", "upstream 0.5.14", "upstream_0_5_14"),
    )

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
        )

    def kv_dtype(
        self, launch: ResolvedLaunch, model_config: Any, *, is_draft: bool, target_kv_dtype: Any
    ) -> str:
        runner = unloaded_runner(launch.args, model_config, is_draft=is_draft)
        return kv_dtype_name(runner.kv_cache_dtype)

    def pool_prices(self, launch: ResolvedLaunch, device: DeviceSpec) -> PoolPrices:
        from sglang.srt.configs.model_config import ModelConfig

        from sglang_specinit.sglang_0_5_14 import pool_probe

        args = launch.args
        target = unloaded_runner(args, launch.target_model_config, is_draft=False)
        drafts = []
        draft_mc = None
        algorithm = args.speculative_algorithm
        if algorithm is not None and algorithm != "NGRAM":
            draft_mc = build_model_config(
                ModelConfig.from_server_args,
                launch.config_source,
                model_path=args.speculative_draft_model_path or args.model_path,
                model_revision=args.speculative_draft_model_revision,
                is_draft_model=True,
            )
            drafts.append(unloaded_runner(args, draft_mc, is_draft=True))
        reserve_draft_layers(target, args, draft_mc)
        refuse_swa_chunk_cap(target)
        split = pool_probe.target_split(target)
        on_cpu = pricing_device() == "cpu"
        with (
            attention_tp_size_answering(launch.attn_tp_size),
            kv_warm_up_copy_skipped() if on_cpu else contextlib.nullcontext(),
        ):
            target_kv = pool_probe.measure_runner(target, split)
            draft_pools = tuple(pool_probe.measure_runner(r, split) for r in drafts)
        return PoolPrices(
            target_kv=target_kv,
            draft_pools=draft_pools,
            draft_fixed_bytes=0,
            stock_plan=lambda inputs: stock_plan_0_5_14(target, launch.attn_tp_size, inputs),
        )


REPLAY = Replay0514()


def stock_beside(plan: OfflinePlan) -> StockBeside | None:
    """The installed release's stock column beside this package's; None when planned from
    another release's environment (the modelled columns)."""
    if plan.release_stock is None:
        return None
    return StockBeside(base=plan, stock=plan.release_stock, release=installed_release())
