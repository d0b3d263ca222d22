"""The offline plan on 0.5.19 - 0.5.23: flags through the release's parser, ``resolve_once`` and
``check_server_args`` on the planned device; every pool priced by the server's own code on
configurators published without weights; stock's column is its own configurator's rule."""

from __future__ import annotations

import contextlib
import copy
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from sglang_specinit.budget import BudgetInputs, PoolPlan
from sglang_specinit.model_facts import kv_dtype_name, own_hf_config
from sglang_specinit.planner.gpus import DeviceSpec
from sglang_specinit.planner.inputs import PlanError
from sglang_specinit.planner.replay import (
    InstalledReleaseReplay,
    PoolPrices,
    ResolvedLaunch,
    config_errors,
    duplicates_note,
    installed_release,
    kv_cache_quant_algo,
    parse_launch_flags,
    refuse_unpriced_model,
    short_reserve_note,
)
from sglang_specinit.planner.replay import build_model_config as _model_config
from sglang_specinit.planner.replay import released as _released
from sglang_specinit.sglang_0_5_23.kernel_arch import refuse_unrunnable_kernels
from sglang_specinit.sglang_0_5_23.planned_device import planned_device
from sglang_specinit.sglang_0_5_23.pricing_host import (
    import_pool_code_here,
    kv_warm_up_copy_skipped,
    pricing_device,
    require_sgl_kernel,
)


class ResolvedArgs:
    """A resolved record read field by field as the published config reads it."""

    def __init__(self, server_args: Any) -> None:
        from sglang.srt.arg_groups.arg_utils import field_names

        self._server_args = server_args
        self._fields = field_names(type(server_args))

    def __getattr__(self, name: str) -> Any:
        from sglang.srt.arg_groups.overrides import resolution_result

        from sglang_specinit.sglang_0_5_23.release_shims import NOT_DERIVED, derived_server_arg

        derived = derived_server_arg(self, name)  # attention DP's field per release
        if derived is not NOT_DERIVED:
            return derived
        if name not in self._fields:
            raise AttributeError(f"sglang {installed_release()} ServerArgs has no field {name!r}")
        return resolution_result(self._server_args, name)


@dataclass(frozen=True)
class ResolvedLaunch0523(ResolvedLaunch):
    """What resolution decided, plus every field as the launch gave it (the pricing input)."""

    launch_inputs: dict[str, Any] = field(default_factory=dict)


# Must resolve alike on the planned device and on the host the pools are priced on.
POOL_FIELDS = (
    "page_size",
    "kv_cache_dtype",
    "speculative_draft_kv_cache_dtype",
    "speculative_algorithm",
    "speculative_num_steps",
    "enable_multi_layer_eagle",
    "tp_size",
    "attn_dp_size",
    "dcp_size",
    "swa_full_tokens_ratio",
    "context_length",
)


class Replay0523(InstalledReleaseReplay):
    """The installed release's parser, ``resolve_once`` and ``check_server_args``."""

    prices_deepseek_v4 = True

    def config_merger(self) -> Any:
        from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger

        return ConfigArgumentMerger

    def parse_launch(self, launch: Sequence[str]) -> Any:
        from sglang.srt.server_args import ServerArgs

        server_args = ServerArgs.from_cli_args(parse_launch_flags(launch, self.config_merger()))
        if server_args.device is None:
            server_args.device = "cuda"
        return server_args

    def resolve(self, server_args: Any, device: DeviceSpec) -> ResolvedLaunch:
        from sglang.srt.arg_groups.arg_utils import field_names
        from sglang.srt.configs.model_config import AttentionArch, ModelConfig

        from sglang_specinit.sglang_0_5_23.release_shims import attn_tp_size_of

        launch_inputs = {
            name: copy.deepcopy(getattr(server_args, name))
            for name in field_names(type(server_args))
        }
        require_sgl_kernel()
        # A copy resolved under this host's facts first, so lazily imported modules keep this
        # host's import-time constants rather than the planned device's; only its imports count.
        with contextlib.suppress(Exception):
            copy.deepcopy(server_args).resolve_once()
        with planned_device(server_args.device, device):
            try:
                server_args.resolve_once()
                server_args.check_server_args()
            # check_server_args refuses with assertions, the resolution hooks with RuntimeError
            # (an FP4 KV cache on a GPU without it) or ImportError (--device npu without torch_npu).
            except (AssertionError, RuntimeError, ImportError) as e:
                why = str(e) or traceback.extract_tb(e.__traceback__)[-1].line  # a bare assert
                raise PlanError(f"sglang {installed_release()} refuses this launch: {why}") from e
            except config_errors() as e:  # resolution builds the launch's model configs
                why = f"cannot read the model configs (config.json): {e}"
                raise PlanError(f"sglang {installed_release()} {why}") from e
            pp = int(server_args.pp_size)
            if pp > 1 and server_args.speculative_algorithm is not None:
                # Stages differ in weights and draft; the planner has one rank's.
                raise PlanError(
                    f"--pp-size {pp} with --speculative-algorithm "
                    f"{server_args.speculative_algorithm}: the planner plans one rank and PP "
                    "stages differ in layers, weights and draft, so it has no per-stage plan; "
                    "the server prices each stage and logs each stage's breakdown "
                    "(SPECINIT_MEMORY, pp_rank)"
                )
            args = ResolvedArgs(server_args)
            target_mc = _model_config(ModelConfig.from_server_args, server_args)
            own_hf_config(target_mc)
            refuse_unpriced_model(target_mc)
            if server_args.device == "cuda":
                refuse_unrunnable_kernels(
                    args,
                    launch_inputs,
                    mla=target_mc.attention_arch == AttentionArch.MLA,
                    release=installed_release(),
                    device_name=device.name,
                    sm=device.sm,
                )
        fraction = float(args.mem_fraction_static)
        return ResolvedLaunch0523(
            args=args,
            config_source=server_args,
            target_model_config=target_mc,
            stock_fraction=fraction,
            new_fraction=fraction,
            attn_tp_size=int(attn_tp_size_of(args)),
            dp_size=int(args.attn_dp_size),
            mla_server_args=None,
            launch_inputs=launch_inputs,
        )

    def kv_dtype(
        self, launch: ResolvedLaunch, model_config: Any, *, is_draft: bool, target_kv_dtype: Any
    ) -> str:
        """``configure_kv_cache_dtype`` as the model runner calls it."""
        import torch
        from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        from sglang_specinit.sglang_0_5_23.release_shims import (
            draft_kv_cache_dtype_kwargs,
            draft_kv_own_dtype,
        )

        args = launch.args
        algorithm = args.speculative_algorithm
        quant = SimpleNamespace(kv_cache_quant_algo=kv_cache_quant_algo(model_config))
        _, dtype = configure_kv_cache_dtype(
            server_args_kv_cache_dtype=args.kv_cache_dtype,
            model=SimpleNamespace(quant_config=quant),
            model_dtype=model_config.dtype if model_config.dtype is not None else torch.bfloat16,
            is_draft_worker=is_draft,
            is_dflash=algorithm is not None
            and draft_kv_own_dtype(SpeculativeAlgorithm.from_string(algorithm)),
            speculative_draft_attention_backend=args.speculative_draft_attention_backend,
            **draft_kv_cache_dtype_kwargs(args),
        )
        return kv_dtype_name(dtype)

    def pool_prices(self, launch: ResolvedLaunch, device: DeviceSpec) -> PoolPrices:
        """Every pool priced by the server's own function on the launch's configurators."""
        from sglang_specinit.sglang_0_5_23 import dsv4_sizing

        if launch.args.kv_cache_dtype == "nvfp4" and pricing_device() == "cpu":
            # Its pools read KV scales from the loaded model, and cpu resolves other backends.
            raise PlanError(
                f"sglang {installed_release()} cannot price an nvfp4 KV cache on a host "
                "without CUDA: run plan on a GPU host with this release"
            )
        import_pool_code_here()
        layout = pricing_layout(launch, device)
        if dsv4_sizing.is_dsv4_configurator(create_configurator(layout.target)):
            with warm_up_copy_skipped():
                return dsv4_prices(layout)
        return priced_layout(layout, launch, lambda inputs: stock_plan_0_5_23(layout, inputs))


def warm_up_copy_skipped() -> Any:
    """:func:`kv_warm_up_copy_skipped` where the pools are built on cpu."""
    return kv_warm_up_copy_skipped() if pricing_device() == "cpu" else contextlib.nullcontext()


def priced_layout(layout: Any, launch: ResolvedLaunch, stock: Any) -> PoolPrices:
    """The non-V4 prices of ``layout``: each pool built tiny, frozen-KV drafts at fixed size."""
    from sglang_specinit.model_facts import FROZEN_KV_STAND_IN_TOKENS
    from sglang_specinit.sglang_0_5_23.draft_pricing import stash_row_bytes
    from sglang_specinit.sglang_0_5_23.runtime_budget import price_configurators

    args = launch.args
    frozen = args.speculative_algorithm == "FROZEN_KV_MTP"
    fixed = [(kvc, FROZEN_KV_STAND_IN_TOKENS) for kvc in layout.drafts] if frozen else []
    with warm_up_copy_skipped():
        target_kv, draft_pools, fixed_bytes = price_configurators(
            layout.target, [] if frozen else layout.drafts, fixed
        )
    request_bytes = 0
    if args.enable_multi_layer_eagle and layout.drafts:
        # Multi-layer EAGLE's boundary-KV stash per request row (the live rule).
        request_bytes = stash_row_bytes(
            layout.target.model_config,
            layout.drafts[0].model_config.hidden_size,
            layout.drafts[0].model_dtype,
            num_steps=int(args.speculative_num_steps),
            topk=int(args.speculative_eagle_topk),
        )
    return PoolPrices(target_kv, draft_pools, fixed_bytes, stock, request_bytes)


def dsv4_prices(layout: Any) -> PoolPrices:
    """A DeepSeek-V4 launch priced as the server sizes it (``runtime_budget._resolve_dsv4``)."""
    from sglang_specinit.sglang_0_5_23 import dsv4_sizing, pool_probe

    if not layout.drafts:
        raise PlanError("DeepSeek-V4 without a speculative draft: nothing for the plan to price")
    split = pool_probe.target_split(layout.target)
    draft_prices = tuple(pool_probe.measure_configurator(d, split) for d in layout.drafts)
    reason = dsv4_sizing.unpriced_reason(create_configurator(layout.target))
    if reason is not None:
        raise PlanError(f"DeepSeek-V4 with {reason} is not priced by sglang-specinit")
    priced = dsv4_sizing.priced_configurator(layout.target, draft_prices)
    ours, stock = dsv4_plans(layout, draft_prices)
    return PoolPrices(
        target_kv=dsv4_sizing.target_display_spec(priced),
        draft_pools=draft_prices,
        draft_fixed_bytes=0,
        stock_plan=stock,
        ours_plan=ours,
    )


def create_configurator(kvc: Any) -> Any:
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    return create_memory_pool_configurator(kvc)


def dsv4_plans(layout: Any, draft_prices: Sequence[Any]) -> tuple[Any, Any]:
    """(our plan, stock's plan) of a V4 launch: SGLang's V4 solve with the draft's measured
    term, resp. its own (T + 1) / T reserve with the duplicates resident."""
    from sglang_specinit.budget import static_budget_bytes
    from sglang_specinit.sglang_0_5_23 import dsv4_sizing

    target, drafts = layout.target, layout.drafts
    release = installed_release()

    def ours(inputs: BudgetInputs) -> PoolPlan:
        priced = dsv4_sizing.priced_configurator(target, draft_prices)
        resident = dsv4_sizing.resident_weights(inputs) + inputs.reserved_bytes
        available = static_budget_bytes(inputs) - resident
        padding = dsv4_sizing.draft_padding_bytes(draft_prices)
        config = dsv4_sizing.solve(target, priced, available, padding)
        config = dsv4_sizing.fitted(target, priced, config, available, drafts)
        return dsv4_sizing.plan_of(
            "specinit",
            inputs,
            config,
            dsv4_sizing.built_pools(target, drafts, config),
            dsv4_sizing.draft_bytes_per_row(priced, draft_prices),
            float(priced.bytes_per_full_token),
            resident,
        )

    def stock(inputs: BudgetInputs) -> PoolPlan:
        configurator = create_configurator(target)
        duplicates = inputs.draft.shared_weight_bytes if inputs.draft is not None else 0
        resident = dsv4_sizing.resident_weights(inputs) + duplicates + inputs.reserved_bytes
        config = dsv4_sizing.solve(target, configurator, static_budget_bytes(inputs) - resident, 0)
        notes = [f"{release} reserves the NextN draft as (T + 1) / T target layers"]
        if duplicates:
            notes.append(duplicates_note(release))
        return dsv4_sizing.plan_of(
            f"stock-{release}",
            inputs,
            config,
            dsv4_sizing.built_pools(target, drafts, config),
            dsv4_sizing.stock_draft_bytes_per_row(target),
            float(configurator.bytes_per_full_token),
            resident,
            tuple(notes),
        )

    return ours, stock


_REPLAY = Replay0523()


def __getattr__(name: str) -> Any:
    """``REPLAY``: this module's replay, or the dataclass one before ``resolving_view``."""
    if name != "REPLAY":
        raise AttributeError(name)
    from sglang_specinit.sglang_0_5_23.release_shims import row

    if row().resolving_view:
        return _REPLAY
    from sglang_specinit.sglang_0_5_23.dataclass_replay import DATACLASS_REPLAY

    return DATACLASS_REPLAY


def pricing_layout(launch: ResolvedLaunch, device: DeviceSpec) -> Any:
    """The launch published on the pricing device with the planned page size and KV dtype."""
    planned = launch.args
    with planned_device(str(planned.device), device):
        layout = published_pricing_layout(launch)
    check_pool_fields(planned, ResolvedArgs(layout.server_args), POOL_FIELDS)
    return layout


def published_pricing_layout(launch: ResolvedLaunch, **fields: Any) -> Any:
    """``published_layout`` of the launch's inputs on the pricing device, with ``fields``."""
    from sglang_specinit.sglang_0_5_23.offline_configurator import published_layout

    planned = launch.args
    inputs = dict(
        getattr(launch, "launch_inputs", {}),
        device=pricing_device(),
        page_size=planned.page_size,
        kv_cache_dtype=planned.kv_cache_dtype,
        **fields,
    )
    runners = int(planned.speculative_num_steps) if planned.enable_multi_layer_eagle else 1
    return published_layout(draft_runners=runners, **inputs)


def check_pool_fields(planned: Any, built: Any, fields: Sequence[str]) -> None:
    """Refuse a pool field that resolves otherwise on the pricing host than on the device."""
    for name in fields:
        wanted, got = getattr(planned, name), getattr(built, name)
        if got != wanted:
            raise PlanError(
                f"sglang {installed_release()} resolves --{name.replace('_', '-')} to "
                f"{wanted!r} on the planned device but to {got!r} when its pools are "
                f"built on {pricing_device()}; pass --{name.replace('_', '-')} explicitly"
            )


def stock_plan_0_5_23(layout: Any, inputs: BudgetInputs) -> PoolPlan:
    """Stock's plan: its own cell and ``config_from_budget`` on the budget it profiles."""
    from sglang.srt.runtime_context import get_context

    from sglang_specinit.budget import (
        make_plan,
        resident_after_sizing,
        resident_with_duplicates,
        static_budget_bytes,
    )

    kvc = layout.target
    if get_context().server_args is not layout.server_args:
        raise RuntimeError("the pricing layout is no longer the published sglang context")
    draft = inputs.draft
    at_profile = resident_with_duplicates(inputs)
    available = static_budget_bytes(inputs) - at_profile - inputs.reserved_bytes
    cell = float(create_configurator(kvc)._cell_size)
    notes: list[str] = []
    release = installed_release()
    try:
        tokens = int(_released(type(kvc).config_from_budget)(kvc, available).max_total_num_tokens)
    except RuntimeError as refusal:
        # Stock cannot start this launch: its column says so rather than the planner failing.
        tokens = 0
        notes.append(f"refuses to start: {refusal}")
    if draft is not None and draft.shared_weight_bytes:
        notes.append(duplicates_note(release))
    if draft is not None and draft.kv_bytes_per_token() > cell - inputs.target_kv.bytes_per_token():
        notes.append(short_reserve_note(release))
    return make_plan(
        f"stock-{release}",
        inputs,
        tokens,
        resident_after_sizing(inputs),
        cell,
        (at_profile + inputs.reserved_bytes) / inputs.pre_load_free_bytes,
        tuple(notes),
        derive_max_reqs=lambda n, *_: int(kvc.resolve_max_num_reqs(n)),
    )
