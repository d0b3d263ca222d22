"""The offline plan on a release this adapter serves whose ``ServerArgs`` is still 0.5.15's
dataclass (0.5.16 - 0.5.18): 0.5.15's server-args half with 0.5.20's pricing half.

0.5.18's KV sizing is 0.5.20's (``KVCacheConfigurator(ps: ParallelState)``, the pool code the
live adapter prices with), but its ``ServerArgs`` resolves every field in ``__post_init__``
(``server_args.py:3585``; no ``resolve_once``, no ``arg_groups/pipeline.py``, no
``runtime_context.override_platform``, no ``overrides.resolution_result``), so
:class:`~sglang_specinit.sglang_0_5_23.planner_replay.Replay0523`'s resolution cannot run there.
What runs instead (:class:`DataclassReplay`):

* **server args**: the dataclass releases' replay (:mod:`sglang_specinit.dataclass_args.replay`:
  the release's own parser into a ``ServerArgs`` whose ``__post_init__`` is skipped, its
  ``_handle_cuda_graph_config`` / ``_handle_gpu_memory_settings`` fed the planned device's MiB
  for the automatic fraction, ``speculative_hook.handle_speculative_decoding`` on a copy, the
  attention widths by ``compute_dp_attention_world_info``);
* **pools**: ``Replay0523.pool_prices``' own path (``offline_configurator.published_layout``,
  ``runtime_budget.price_configurators``, stock's ``config_from_budget``) on this host's device,
  with one difference: 0.5.18's ``get_parallel()`` answers widths only from live process
  groups (``runtime_context.py:113-260``: ``_ps().get_attn_tensor_model_parallel_world_size``
  ...) or its own ``override`` (``:158``), so the planner's rank 0 reads them through that
  override (:func:`rank0_widths`), set from the resolved launch as ``initialize_model_parallel``
  would build the groups.
"""

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
from sglang_specinit.planner.inputs import PlanError
from sglang_specinit.planner.replay import (
    PoolPrices,
    ResolvedLaunch,
    installed_release,
)
from sglang_specinit.sglang_0_5_23.planner_replay import (
    Replay0523,
    ResolvedLaunch0523,
    _request_bytes,
    stock_plan_0_5_23,
)
from sglang_specinit.sglang_0_5_23.pricing_host import (
    kv_warm_up_copy_skipped,
    pricing_device,
    require_sgl_kernel,
)

# What decides the pools, checked equal between the planned resolution and the ServerArgs the
# pricing layout is published with (0.5.18 stores attention DP as these two fields).
POOL_FIELDS = (
    "page_size",
    "kv_cache_dtype",
    "speculative_draft_kv_cache_dtype",
    "speculative_algorithm",
    "speculative_num_steps",
    "enable_multi_layer_eagle",
    "tp_size",
    "dp_size",
    "enable_dp_attention",
    "dcp_size",
    "swa_full_tokens_ratio",
    "context_length",
)


def attention_widths(args: Any) -> tuple[int, int]:
    """(attn_tp_size, attn_dp_size) as the release's scheduler computes them
    (``layers.dp_attention.compute_dp_attention_world_info``, rank 0)."""
    from sglang.srt.layers.dp_attention import compute_dp_attention_world_info

    _, attn_tp, _, attn_dp = compute_dp_attention_world_info(
        args.enable_dp_attention, 0, args.tp_size, args.dp_size, args.attn_cp_size
    )
    return int(attn_tp), int(attn_dp)


@contextlib.contextmanager
def rank0_widths(args: Any) -> Iterator[None]:
    """``get_parallel()`` answering rank 0's widths for ``args`` (the release's own
    ``ParallelContext.override``), as its process groups would: attention TP / DP by the
    scheduler's rule, decode context parallel only for more than one rank (the group exists
    only then: ``dcp_enabled``, ``attn_dcp_size``)."""
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


def input_fields(server_args: Any) -> dict[str, Any]:
    """Every dataclass field as the launch gave it (before resolution)."""
    return {
        f.name: copy.deepcopy(getattr(server_args, f.name))
        for f in dataclasses.fields(server_args)
        if f.init
    }


class DataclassReplay(Replay0523, FieldServerArgsReplay):
    """0.5.18: the dataclass releases' parser and resolution steps, 0.5.20's pool pricing."""

    # No DeepSeek-V4 solve on this release's configurator is checked here.
    prices_deepseek_v4 = False

    def parse_launch(self, launch: Any) -> Any:
        return FieldServerArgsReplay.parse_launch(self, launch)

    def resolve(self, server_args: Any, device: DeviceSpec) -> ResolvedLaunch:

        launch_inputs = input_fields(server_args)
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
            # No flat speculative reserve: one fraction for both columns.
            stock_fraction=float(fraction),
            new_fraction=float(fraction),
            attn_tp_size=attn_tp,
            dp_size=attn_dp,
            mla_server_args=None,
            launch_inputs=launch_inputs,
        )

    def pool_prices(self, launch: ResolvedLaunch, device: DeviceSpec) -> PoolPrices:
        """Every pool priced by the server's function (``runtime_budget.
        price_configurators``) on the configurators this release builds for the launch, under
        rank 0's widths (:func:`rank0_widths`); stock's column on the same configurator."""
        from sglang_specinit.model_facts import FROZEN_KV_STAND_IN_TOKENS
        from sglang_specinit.sglang_0_5_23.runtime_budget import price_configurators

        planned = launch.args
        on_cpu = pricing_device() == "cpu"
        with rank0_widths(planned):
            layout = self._layout(launch)
            fixed_tokens = (
                FROZEN_KV_STAND_IN_TOKENS
                if planned.speculative_algorithm == "FROZEN_KV_MTP"
                else None
            )
            fixed = [(kvc, fixed_tokens) for kvc in layout.drafts] if fixed_tokens else []
            pool_drafts = [] if fixed_tokens else layout.drafts
            with kv_warm_up_copy_skipped() if on_cpu else contextlib.nullcontext():
                target_kv, draft_pools, fixed_bytes = price_configurators(
                    layout.target, pool_drafts, fixed
                )

        def stock(inputs: BudgetInputs) -> PoolPlan:
            with rank0_widths(planned):
                return stock_plan_0_5_23(layout, inputs)

        return PoolPrices(
            target_kv=target_kv,
            draft_pools=draft_pools,
            draft_fixed_bytes=fixed_bytes,
            draft_request_bytes=_request_bytes(layout, launch),
            stock_plan=stock,
        )

    @staticmethod
    def _layout(launch: ResolvedLaunch) -> Any:
        """The launch published on this host's device with the planned page size and KV
        dtype; every field that decides a pool must resolve as it did for the planned
        device (:data:`POOL_FIELDS`)."""
        from sglang_specinit.sglang_0_5_23.offline_configurator import published_layout

        planned = launch.args
        built_on = pricing_device()
        inputs = dict(
            getattr(launch, "launch_inputs", {}),
            device=built_on,
            page_size=planned.page_size,
            kv_cache_dtype=planned.kv_cache_dtype,
            mem_fraction_static=planned.mem_fraction_static,
        )
        # Built by ModelConfig again from the flags; not a field the constructor takes.
        inputs.pop("model_config", None)
        runners = int(planned.speculative_num_steps) if planned.enable_multi_layer_eagle else 1
        with planned_cpu_engine(built_on):
            layout = published_layout(draft_runners=runners, **inputs)
        for name in POOL_FIELDS:
            if not hasattr(planned, name):  # 0.5.16, 0.5.17: no --speculative-draft-kv-cache-dtype
                continue
            built, wanted = getattr(layout.server_args, name), getattr(planned, name)
            if built != wanted:
                raise PlanError(
                    f"sglang {installed_release()} resolves --{name.replace('_', '-')} to "
                    f"{wanted!r} on the planned device but to {built!r} when its pools are "
                    f"built on {built_on}; pass --{name.replace('_', '-')} explicitly"
                )
        return layout


DATACLASS_REPLAY = DataclassReplay()
