"""The planner's replay for 0.5.13.x: SGLang's parser, fraction methods and speculative hook on
copies, and every pool priced by ``pool_probe.measure_kv_pool`` on runners without weights."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from sglang_specinit.budget import BudgetInputs, PoolPlan, draft_weight_bytes_of
from sglang_specinit.dataclass_args.replay import (
    FieldServerArgsReplay,
    attention_tp_size,
    check_kv4,
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
    kv_cache_quant_algo,
    released,
)
from sglang_specinit.pool_measure import runner_token_split
from sglang_specinit.runner_sizing.unloaded_runner import (
    pricing_pools,
    reserve_draft_layers,
    runner_stock_plan,
    unloaded_draft_runner,
    unloaded_runner,
)

DRAFT_OUTSIDE_NOTE = "draft weights and KV are allocated after the target pool, outside the budget"

# --kv-cache-dtype choices -> the torch dtype ModelRunner stores.
_KV_DTYPE_FLAGS = {
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp4_e2m1": "float4_e2m1fn_x2",
}


def auto_mem_fraction_static(server_args: Any, capacity_mib: float, spec_reserve: bool) -> float:
    """The ``--mem-fraction-static`` SGLang picks when the user passes none; without
    ``spec_reserve``, 0.5.14's arithmetic (no 4/6 GiB draft term). SGLang's quirks are kept."""
    from sglang.srt.server_args import ServerArgs

    trial = copy.copy(server_args)
    released(ServerArgs._handle_piecewise_cuda_graph)(trial)
    # Its only other effect is a symmetric-memory default.
    trial.enable_symm_mem = False
    if not spec_reserve:
        trial.speculative_algorithm = None
    released(ServerArgs._handle_gpu_memory_settings)(trial, capacity_mib)
    return float(trial.mem_fraction_static)


def resolve_kv_dtype(flag: str, model_config: Any) -> str:
    """The KV dtype ``ModelRunner.configure_kv_cache_dtype`` would pick."""
    if flag == "auto":
        if kv_cache_quant_algo(model_config) == "FP8":
            return "float8_e4m3fn"
        return kv_dtype_name(model_config.dtype)
    return _KV_DTYPE_FLAGS[flag]


# Draft decode backends whose multi-step class reads its first per-step backend when built: with
# no draft step it has none, and every rank fails to start (fa3's builds an empty list).
_BACKENDS_NEEDING_A_DRAFT_STEP = ("triton", "flashinfer", "aiter")


def check_draft_steps(server_args: Any) -> None:
    """An EAGLE-worker launch with ``--speculative-num-steps 0`` fails on every rank when its
    draft decode backend needs a step (later releases build no backend for 0 steps)."""
    algorithm = server_args.speculative_algorithm
    if algorithm not in ("EAGLE", "EAGLE3", "STANDALONE") or server_args.speculative_num_steps != 0:
        return
    backend = (
        server_args.speculative_draft_attention_backend
        or server_args.decode_attention_backend
        or server_args.attention_backend
    )
    if backend in _BACKENDS_NEEDING_A_DRAFT_STEP:
        raise PlanError(
            f"--speculative-num-steps 0: the {backend} draft decode backend of sglang "
            "0.5.13.post1 needs a draft step, so every rank fails to start; pass "
            "--speculative-num-steps 1 or more"
        )


class Replay0513(FieldServerArgsReplay):
    release = "0.5.13.post1"
    shortest_request_tokens = 6  # its scheduler keeps 5 of them for the output

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
            if int(spec_args.pp_size) > 1 and spec_args.speculative_algorithm is not None:
                raise PlanError(
                    f"--pp-size {spec_args.pp_size} with --speculative-algorithm "
                    f"{spec_args.speculative_algorithm}: sglang 0.5.13.post1 refuses pipeline "
                    "parallelism with speculative decoding (ServerArgs.check_server_args); "
                    "drop --pp-size"
                )
            check_draft_steps(spec_args)
        return ResolvedLaunch(
            args=spec_args,
            config_source=spec_args,
            target_model_config=target_mc,
            stock_fraction=stock,
            new_fraction=new,
            attn_tp_size=attn_tp,
            dp_size=int(spec_args.dp_size),
            mla_server_args=spec_args,
            notes=check_kv4(spec_args, self.release),
        )

    def kv_dtype(
        self, launch: ResolvedLaunch, model_config: Any, *, is_draft: bool, target_kv_dtype: Any
    ) -> str:
        flag = launch.args.kv_cache_dtype
        if is_draft and target_kv_dtype == "float8_e4m3fn":
            # The target rewrites "auto" to fp8_e4m3 for an FP8 checkpoint; the draft reads it.
            flag = "fp8_e4m3"
        return resolve_kv_dtype(flag, model_config)

    def pool_prices(self, launch: ResolvedLaunch, device: DeviceSpec) -> PoolPrices:
        from sglang_specinit.sglang_0_5_13.pool_probe import measure_kv_pool

        args = launch.args
        target = unloaded_runner(args, launch.target_model_config, is_draft=False)
        split = runner_token_split(target)
        algorithm = args.speculative_algorithm
        draft = unloaded_draft_runner(launch)
        reserve_draft_layers(target, args, None if draft is None else draft.model_config)
        attn_tp = launch.attn_tp_size

        def stock(inputs: BudgetInputs) -> PoolPlan:
            """Stock 0.5.13.x's plan: the target's pool is sized before the draft loads (only
            the target's weights resident at the profile); the draft's land on top."""
            weights = inputs.target_weight_bytes
            resident = weights + draft_weight_bytes_of(inputs)
            plan = runner_stock_plan(target, attn_tp, inputs, at_profile=weights, resident=resident)
            return plan if inputs.draft is None else replace(plan, notes=(DRAFT_OUTSIDE_NOTE,))

        with pricing_pools(launch.attn_tp_size):
            target_kv = measure_kv_pool(target, *split)
            draft_kv = None if draft is None else measure_kv_pool(draft, *split)
        prices = PoolPrices(target_kv, draft_pools=(), draft_fixed_bytes=0, stock_plan=stock)
        if draft_kv is None:
            return prices
        if algorithm == "FROZEN_KV_MTP":
            fixed = draft_kv.pool_bytes(FROZEN_KV_STAND_IN_TOKENS, int(args.page_size))
            return replace(prices, draft_fixed_bytes=fixed)
        steps = int(args.speculative_num_steps or 1)
        multi_layer = bool(args.enable_multi_layer_eagle)
        per_request = 0
        if multi_layer:
            # req_to_hidden_states_pool: steps - 1 hidden states per request row.
            config = launch.target_model_config
            per_request = (steps - 1) * config.hidden_size * element_bytes(config.dtype)
        pools = (draft_kv,) * (steps if multi_layer else 1)
        return replace(prices, draft_pools=pools, draft_request_bytes=per_request)


REPLAY = Replay0513()
