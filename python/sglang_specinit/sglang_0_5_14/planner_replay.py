"""The server-args replay for sglang 0.5.14 / 0.5.15 (the ``sglang_0_5_14`` adapter's releases).

These releases keep 0.5.13's dataclass ``ServerArgs`` (its ``__post_init__`` resolves every
field) and 0.5.13's speculative hook module, so the replay is 0.5.13.x's
(:class:`~sglang_specinit.dataclass_args.replay.FieldServerArgsReplay`: the release's own parser,
an inert ``ServerArgs``, ``handle_speculative_decoding`` on a copy) with three answers of their own:

* the automatic ``--mem-fraction-static`` is the installed release's
  ``ServerArgs._handle_cuda_graph_config`` then ``_handle_gpu_memory_settings`` on a copy, fed
  the device's total MiB (0.5.14 dropped the flat speculative reserve, so stock and this
  package start from the same fraction);
* the KV dtype is the release's own ``ModelRunner.configure_kv_cache_dtype``;
* every pool is priced by the function the live adapter runs,
  ``sglang_0_5_14.pool_probe.measure_runner`` (the runner's own ``_apply_memory_pool_config``
  at tiny sizes), on runners built without weights (:func:`unloaded_runner`): a
  ``ModelRunner`` whose ``__init__`` is not run, holding the fields ``__init__`` and
  ``initialize`` set that the pool code reads, each from the same source they use.

**The stock column is the installed release's own sizing** (:func:`stock_plan_0_5_14`): the
target runner's ``_resolve_memory_pool_config`` on the unloaded target runner
(:func:`runner_stock_plan`), holding the draft reserve ``__init__`` reads from the draft's
config (:func:`reserve_draft_layers`), profiled with what this release has resident then: both
models' weights and the draft's duplicate embed/lm_head (``budget.resident_with_duplicates``).

The pools are built on this host (:func:`pricing_device`); on cpu the KV pool's Triton warm-up
copy, which copies slot 0 onto itself and allocates nothing, is skipped for the pricing call
(:func:`kv_warm_up_copy_skipped`).
"""

from __future__ import annotations

import contextlib
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
    build_model_config,
    duplicates_note,
    installed_release,
    short_reserve_note,
)
from sglang_specinit.runner_sizing.unloaded_runner import (
    attention_tp_size_answering,
    kv_warm_up_copy_skipped,
    pricing_device,
    reserve_draft_layers,
    runner_stock_plan,
    unloaded_runner,
)


def refuse_swa_chunk_cap(target: Any) -> None:
    """A hybrid-SWA target whose SWA pool the release caps by requests (``--disable-radix-cache``
    with a request cap and chunked prefill: ``SWAChunkCapPoolConfigurator``) is sized from
    the loaded model's sliding window, which a runner without weights does not have."""
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
    """Stock's plan by the installed release's own sizing on the unloaded target runner
    (:func:`runner_stock_plan`), profiled with what this release has resident when the target
    profiles: both models' weights, the draft's duplicate embed/lm_head still held (a
    frozen-KV MTP draft loads after the target's pool)."""
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
    """sglang 0.5.14 / 0.5.15: 0.5.13.x's parser and speculative hook, the release's own
    fraction heuristic, KV dtype and pool code (module docstring)."""

    def resolve(self, server_args: Any, device: DeviceSpec) -> ResolvedLaunch:
        with planned_cpu_engine(server_args.device):
            target_mc = target_model_config(server_args)
            fraction = server_args.mem_fraction_static
            if fraction is None:
                fraction = auto_mem_fraction_static(server_args, device.capacity_mib)
            server_args.mem_fraction_static = float(fraction)
            spec_args = resolve_speculative(server_args)
            attn_tp = attention_tp_size(spec_args)
            # The adapter keeps stock sizing there (launch_policy): nothing of ours to plan.
            refuse_speculative_pp(spec_args, installed_release())
        return ResolvedLaunch(
            args=spec_args,
            config_source=spec_args,
            target_model_config=target_mc,
            # 0.5.14 has no flat speculative reserve: one fraction for every column.
            stock_fraction=float(fraction),
            new_fraction=float(fraction),
            attn_tp_size=attn_tp,
            dp_size=int(spec_args.dp_size),
            mla_server_args=spec_args,
        )

    def kv_dtype(
        self, launch: ResolvedLaunch, model_config: Any, *, is_draft: bool, target_kv_dtype: Any
    ) -> str:
        """``ModelRunner.configure_kv_cache_dtype`` of the installed release; the target's runs
        first and may rewrite ``kv_cache_dtype`` for an FP8 checkpoint, as the server's does."""
        runner = unloaded_runner(launch.args, model_config, is_draft=is_draft)
        return kv_dtype_name(runner.kv_cache_dtype)

    def pool_prices(self, launch: ResolvedLaunch, device: DeviceSpec) -> PoolPrices:
        """Every pool priced by the live adapter's function (``pool_probe.measure_runner``) on
        runners built without weights; draft pools follow the target's token split."""
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

