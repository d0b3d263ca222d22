"""The offline plan on 0.5.16 - 0.5.18 (a resolving dataclass ``ServerArgs``): the dataclass
releases' replay, pools priced as :class:`.planner_replay.Replay0523` prices them under rank 0's
widths (``get_parallel().override``: no process groups exist offline)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Iterator
from typing import Any

from sglang_specinit.budget import BudgetInputs, PoolPlan
from sglang_specinit.dataclass_args.replay import (
    FieldServerArgsReplay,
    auto_mem_fraction_static,
    planned_cpu_engine,
    refuse_speculative_pp,
    resolve_speculative,
    target_model_config,
)
from sglang_specinit.planner.gpus import DeviceSpec
from sglang_specinit.planner.replay import PoolPrices, ResolvedLaunch, installed_release
from sglang_specinit.sglang_0_5_23.planner_replay import (
    POOL_FIELDS,
    Replay0523,
    ResolvedLaunch0523,
    check_pool_fields,
    priced_layout,
    published_pricing_layout,
    stock_plan_0_5_23,
)
from sglang_specinit.sglang_0_5_23.pricing_host import (
    import_pool_code_here,
    pricing_device,
    require_sgl_kernel,
)

# Attention DP as these releases store it.
DATACLASS_POOL_FIELDS = tuple(
    stored
    for name in POOL_FIELDS
    for stored in (("dp_size", "enable_dp_attention") if name == "attn_dp_size" else (name,))
)


def attention_widths(args: Any) -> tuple[int, int]:
    """(attn_tp_size, attn_dp_size) as the release's scheduler computes them for rank 0."""
    from sglang.srt.layers.dp_attention import compute_dp_attention_world_info

    _, attn_tp, _, attn_dp = compute_dp_attention_world_info(
        args.enable_dp_attention, 0, args.tp_size, args.dp_size, args.attn_cp_size
    )
    return int(attn_tp), int(attn_dp)


@contextlib.contextmanager
def rank0_widths(args: Any) -> Iterator[None]:
    """``get_parallel()`` answering rank 0's widths for ``args``, as its process groups would."""
    from sglang.srt.runtime_context import get_parallel

    attn_tp, attn_dp = attention_widths(args)
    dcp = int(args.dcp_size or 1)
    widths = dict(
        tp_size=int(args.tp_size),
        pp_size=int(args.pp_size),
        attn_tp_size=attn_tp,
        attn_dp_size=attn_dp,
        attn_cp_size=int(args.attn_cp_size),
        dcp_size=dcp,
        dcp_enabled=dcp > 1,
        attn_dcp_size=dcp if dcp > 1 else 1,
        moe_ep_size=int(args.ep_size),
        moe_dp_size=int(args.moe_dp_size),
    )
    ranks = ("tp_rank", "pp_rank", "attn_tp_rank", "attn_dp_rank", "attn_cp_rank", "dcp_rank")
    widths.update(dict.fromkeys(ranks, 0))
    widths.update(attn_dcp_rank=0, moe_ep_rank=0, moe_dp_rank=0)
    with get_parallel().override(**widths):
        yield


class DataclassReplay(Replay0523, FieldServerArgsReplay):
    """The dataclass releases' parser and resolution, :class:`Replay0523`'s pool pricing."""

    prices_deepseek_v4 = False

    def config_merger(self) -> Any:
        from sglang.srt.server_args_config_parser import ConfigArgumentMerger

        return ConfigArgumentMerger

    def parse_launch(self, launch: Any) -> Any:
        return FieldServerArgsReplay.parse_launch(self, launch)

    def resolve(self, server_args: Any, device: DeviceSpec) -> ResolvedLaunch:

        launch_inputs = {
            f.name: copy.deepcopy(getattr(server_args, f.name))
            for f in dataclasses.fields(server_args)
            if f.init and f.name != "model_config"
        }
        require_sgl_kernel()
        with planned_cpu_engine(server_args.device):
            target_mc = target_model_config(server_args)
            fraction = server_args.mem_fraction_static
            if fraction is None:
                fraction = auto_mem_fraction_static(server_args, device.capacity_mib)
            server_args.mem_fraction_static = float(fraction)
            spec_args = resolve_speculative(server_args)
        refuse_speculative_pp(spec_args, installed_release())
        attn_tp, attn_dp = attention_widths(spec_args)
        return ResolvedLaunch0523(
            args=spec_args,
            config_source=spec_args,
            target_model_config=target_mc,
            stock_fraction=float(fraction),
            new_fraction=float(fraction),
            attn_tp_size=attn_tp,
            dp_size=attn_dp,
            mla_server_args=None,
            launch_inputs=launch_inputs,
        )

    def pool_prices(self, launch: ResolvedLaunch, device: DeviceSpec) -> PoolPrices:
        """Both columns priced as :meth:`Replay0523.pool_prices`, under rank 0's widths."""
        import_pool_code_here()
        planned = launch.args

        def stock(inputs: BudgetInputs) -> PoolPlan:
            with rank0_widths(planned):
                return stock_plan_0_5_23(layout, inputs)

        with rank0_widths(planned):
            with planned_cpu_engine(pricing_device()):
                layout = published_pricing_layout(
                    launch, mem_fraction_static=planned.mem_fraction_static
                )
            # 0.5.16, 0.5.17: no --speculative-draft-kv-cache-dtype
            fields = [name for name in DATACLASS_POOL_FIELDS if hasattr(planned, name)]
            check_pool_fields(planned, layout.server_args, fields)
            return priced_layout(layout, launch, stock)


DATACLASS_REPLAY = DataclassReplay()
