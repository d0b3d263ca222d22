"""The server-args replay for sglang 0.5.13.x: SGLang's own logic, run without its side effects.

For 0.5.13.post1 (:class:`Replay0513`, :data:`REPLAY_0_5_13`):

* the server arguments come from SGLang's own parser, turned into a ``ServerArgs`` whose
  ``__post_init__`` is skipped (that method probes devices and may download configs);
* the automatic ``--mem-fraction-static`` is ``ServerArgs._handle_piecewise_cuda_graph`` and
  ``ServerArgs._handle_gpu_memory_settings`` run on a copy, fed the device's total MiB;
* the speculative settings are ``handle_speculative_decoding`` (``arg_groups/speculative_hook.py``):
  alias resolution (NEXTN -> EAGLE), the MTP rule that a DeepSeek-V3/GLM-class target is its own
  draft, the step/top-k defaults and the ``max_running_requests = 48`` default;
* model geometry comes from ``ModelConfig.from_server_args`` for the target and, with
  ``is_draft_model=True``, for the draft, as ``TpModelWorker._init_model_config`` builds them;
* the KV dtype is ``ModelRunner.configure_kv_cache_dtype``'s choice; every pool is priced by
  the function the 0.5.13 server runs (``pool_probe.measure_kv_pool``) on runners built
  without weights (:meth:`Replay0513.pool_prices`); the model-geometry pricing of
  :mod:`.specs` stays only as a cross-check in the tests.

The plan is for the device the flags name (``--device``, default ``cuda``), never for the host
the planner runs on: SGLang's host probe that would leak this process's platform into the
answer (``is_cpu()``, which reads ``SGLANG_USE_CPU_ENGINE``) is answered for the planned device
while the replay resolves (:func:`planned_cpu_engine`).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import replace
from typing import Any

from sglang_specinit.budget import BudgetInputs, PoolPlan, draft_weight_bytes_of
from sglang_specinit.dataclass_args.replay import (
    FieldServerArgsReplay,
    attention_tp_size,
    planned_cpu_engine,
    resolve_speculative,
    target_model_config,
)
from sglang_specinit.model_facts import (
    FROZEN_KV_STAND_IN_TOKENS,
    element_bytes,
    kv_dtype_name,
)
from sglang_specinit.planner.gpus import DeviceSpec
from sglang_specinit.planner.inputs import PlanError
from sglang_specinit.planner.replay import (
    PoolPrices,
    ResolvedLaunch,
    build_model_config,
    kv_cache_quant_algo,
    released,
)
from sglang_specinit.runner_sizing.unloaded_runner import (
    attention_tp_size_answering,
    kv_warm_up_copy_skipped,
    pricing_device,
    reserve_draft_layers,
    runner_stock_plan,
    unloaded_runner,
)

DRAFT_OUTSIDE_NOTE = "draft weights and KV are allocated after the target pool, outside the budget"

# --kv-cache-dtype values (0.5.13.post1 choices) -> the torch dtype ModelRunner stores.
_KV_DTYPE_FLAGS = {
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp4_e2m1": "float4_e2m1fn_x2",
}


def auto_mem_fraction_static(server_args: Any, capacity_mib: float, spec_reserve: bool) -> float:
    """The ``--mem-fraction-static`` SGLang picks when the user passes none.

    Runs 0.5.13.post1's ``_handle_piecewise_cuda_graph`` then ``_handle_gpu_memory_settings``
    on a copy. With ``spec_reserve=False`` the speculative algorithm is hidden from the latter,
    which leaves exactly 0.5.14's arithmetic (0.5.14 deleted the 4/6 GiB draft term and changed
    nothing else in that computation). The comparison with the raw CLI string is SGLang's own,
    so its quirk (``standalone`` in lower case gets 4 GiB, not 6) is reproduced, not fixed.
    """
    from sglang.srt.server_args import ServerArgs

    trial = copy.copy(server_args)
    released(ServerArgs._handle_piecewise_cuda_graph)(trial)
    # Its only other effect is an environment default for symmetric memory; keep ours clean.
    trial.enable_symm_mem = False
    if not spec_reserve:
        trial.speculative_algorithm = None
    released(ServerArgs._handle_gpu_memory_settings)(trial, capacity_mib)
    return float(trial.mem_fraction_static)


def resolve_kv_dtype(flag: str, model_config: Any) -> str:
    """The KV dtype ``ModelRunner.configure_kv_cache_dtype`` (0.5.13.post1) would pick."""
    if flag == "auto":
        if kv_cache_quant_algo(model_config) == "FP8":
            return "float8_e4m3fn"
        return kv_dtype_name(model_config.dtype)
    return _KV_DTYPE_FLAGS[flag]


def check_parallel_layout(server_args: Any) -> None:
    """Refuse what SGLang 0.5.13.post1 itself refuses to launch with a speculative algorithm.

    ``ServerArgs.check_server_args`` asserts that pipeline parallelism runs without speculative
    decoding (it needs the overlap schedule off and no draft), so no PP plan can be served.
    """
    if int(server_args.pp_size) > 1 and server_args.speculative_algorithm is not None:
        raise PlanError(
            f"--pp-size {server_args.pp_size} with --speculative-algorithm "
            f"{server_args.speculative_algorithm}: sglang 0.5.13.post1 refuses pipeline "
            "parallelism with speculative decoding (ServerArgs.check_server_args); drop --pp-size"
        )


def stock_plan_0_5_13(target: Any, attn_tp_size: int, inputs: BudgetInputs) -> PoolPlan:
    """Stock 0.5.13.x's plan by its own sizing on the unloaded target runner
    (:func:`~sglang_specinit.runner_sizing.unloaded_runner.runner_stock_plan`): the target's pool is
    sized before the draft loads, so only the target's weights are resident at the profile
    (whatever ``--resident-bytes`` measured of this package's run); the draft's weights and
    KV then land on top of the budget."""
    plan = runner_stock_plan(
        target,
        attn_tp_size,
        inputs,
        at_profile=inputs.target_weight_bytes,
        resident=inputs.target_weight_bytes + draft_weight_bytes_of(inputs),
    )
    if inputs.draft is None:
        return plan
    return replace(plan, notes=(DRAFT_OUTSIDE_NOTE,))


class Replay0513(FieldServerArgsReplay):
    """sglang 0.5.13.x: ``ServerArgs`` without ``__post_init__``, its two memory methods and the
    speculative hook run on copies (:func:`inert_server_args`, :func:`auto_mem_fraction_static`,
    :func:`resolve_speculative`), ``ModelRunner.configure_kv_cache_dtype``'s choice."""

    release = "0.5.13.post1"
    stock_key = "stock_0_5_13"

    def resolve(self, server_args: Any, device: DeviceSpec) -> ResolvedLaunch:
        with planned_cpu_engine(server_args.device):
            target_mc = target_model_config(server_args)
            user_fraction = server_args.mem_fraction_static
            if user_fraction is None:
                stock = auto_mem_fraction_static(server_args, device.capacity_mib, True)
                new = auto_mem_fraction_static(server_args, device.capacity_mib, False)
            else:
                stock = new = float(user_fraction)
            spec_args = resolve_speculative(server_args)
            attn_tp = attention_tp_size(spec_args)
            check_parallel_layout(spec_args)
        return ResolvedLaunch(
            args=spec_args,
            config_source=spec_args,
            target_model_config=target_mc,
            stock_fraction=stock,
            new_fraction=new,
            attn_tp_size=attn_tp,
            dp_size=int(spec_args.dp_size),
            mla_server_args=spec_args,
        )

    def kv_dtype(
        self, launch: ResolvedLaunch, model_config: Any, *, is_draft: bool, target_kv_dtype: Any
    ) -> str:
        flag = launch.args.kv_cache_dtype
        if is_draft and target_kv_dtype == "float8_e4m3fn":
            # The target resolves "auto" first and, for an FP8 kv_cache_quant_algo, rewrites
            # server_args.kv_cache_dtype to fp8_e4m3, which the draft runner then reads.
            flag = "fp8_e4m3"
        return resolve_kv_dtype(flag, model_config)

    def pool_prices(self, launch: ResolvedLaunch, device: DeviceSpec) -> PoolPrices:
        """Every pool priced by the function the 0.5.13 server runs
        (:func:`.pool_probe.measure_kv_pool`: the runner's own ``_apply_memory_pool_config`` at
        tiny sizes), on runners built without weights
        (:func:`~sglang_specinit.runner_sizing.unloaded_runner.unloaded_runner`), with the server's
        token split (:func:`.runtime_budget.target_token_split`). The draft's runners are the
        ones the server describes (:func:`.scheduler.describe_draft`): one runner, one per step
        for multi-layer EAGLE, and for frozen-KV MTP a stand-in pool of fixed size."""
        from sglang.srt.configs.model_config import ModelConfig

        from sglang_specinit.sglang_0_5_13.pool_probe import measure_kv_pool
        from sglang_specinit.sglang_0_5_13.runtime_budget import target_token_split

        args = launch.args
        target = unloaded_runner(args, launch.target_model_config, is_draft=False)
        split = target_token_split(target)
        algorithm = args.speculative_algorithm
        draft = None
        if algorithm is not None and algorithm != "NGRAM":
            draft_mc = build_model_config(
                ModelConfig.from_server_args,
                launch.config_source,
                model_path=args.speculative_draft_model_path or args.model_path,
                model_revision=args.speculative_draft_model_revision,
                is_draft_model=True,
            )
            draft = unloaded_runner(args, draft_mc, is_draft=True)
        reserve_draft_layers(target, args, None if draft is None else draft.model_config)
        attn_tp = launch.attn_tp_size

        def stock(inputs: BudgetInputs) -> PoolPlan:
            return stock_plan_0_5_13(target, attn_tp, inputs)

        on_cpu = pricing_device() == "cpu"
        with (
            attention_tp_size_answering(launch.attn_tp_size),
            kv_warm_up_copy_skipped() if on_cpu else contextlib.nullcontext(),
        ):
            target_kv = measure_kv_pool(target, *split)
            draft_kv = None if draft is None else measure_kv_pool(draft, *split)
        if draft_kv is None:
            return PoolPrices(
                target_kv=target_kv, draft_pools=(), draft_fixed_bytes=0, stock_plan=stock
            )
        if algorithm == "FROZEN_KV_MTP":
            fixed = draft_kv.pool_bytes(FROZEN_KV_STAND_IN_TOKENS, int(args.page_size))
            return PoolPrices(
                target_kv=target_kv, draft_pools=(), draft_fixed_bytes=fixed, stock_plan=stock
            )
        steps = int(args.speculative_num_steps or 1)
        multi_layer = bool(args.enable_multi_layer_eagle)
        per_request = 0
        if multi_layer:
            # req_to_hidden_states_pool: steps - 1 hidden states per request row
            # (multi_layer_eagle.hidden_state_row_bytes on the live draft).
            config = launch.target_model_config
            per_request = (steps - 1) * config.hidden_size * element_bytes(config.dtype)
        return PoolPrices(
            target_kv=target_kv,
            draft_pools=(draft_kv,) * (steps if multi_layer else 1),
            draft_fixed_bytes=0,
            stock_plan=stock,
            draft_request_bytes=per_request,
        )


REPLAY = Replay0513()
# The name the 0.5.13 tests import.
REPLAY_0_5_13 = REPLAY

