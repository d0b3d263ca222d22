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
target runner's ``_resolve_memory_pool_config`` (``create_memory_pool_configurator``, its
``calculate_pool_sizes``, ``_apply_token_constraints``, ``_resolve_max_num_reqs``) on the
unloaded target runner, holding the draft reserve ``__init__`` reads from the draft's config
(:func:`reserve_draft_layers`), with the profiled budget answered by what this release has
resident when it profiles: both models' weights and the draft's duplicate embed/lm_head
(``budget.resident_with_duplicates``: ``--resident-bytes`` plus the duplicates, where given). The
report is then that column beside this package's (:func:`stock_beside`: "stock 0.5.14",
``stock_0_5_14`` in ``--json``).

The pools are built on this host (:func:`pricing_device`); on cpu the KV pool's Triton warm-up
copy, which copies slot 0 onto itself and allocates nothing, is skipped for the pricing call
(:func:`kv_warm_up_copy_skipped`).
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
from sglang_specinit.dataclass_args.replay import (
    FieldServerArgsReplay,
    attention_tp_size,
    auto_mem_fraction_static,
    planned_cpu_engine,
    refuse_speculative_pp,
    resolve_speculative,
    target_model_config,
)
from sglang_specinit.model_facts import (
    kv_dtype_name,
    upstream_reserved_layers,
)
from sglang_specinit.planner.columns import StockBeside
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
from sglang_specinit.runner_sizing.unloaded_runner import (
    attention_tp_size_answering,
    kv_warm_up_copy_skipped,
    pricing_device,
    unloaded_runner,
)


def reserve_draft_layers(target: Any, server_args: Any, draft_mc: Any) -> None:
    """The draft reserve the target runner's ``__init__`` reads from the draft's config
    (``model_runner.py`` in 0.5.14 / 0.5.15), which its pool configurator scales the cell by:
    ``eagle_draft_num_layers`` for EAGLE / EAGLE3 / frozen-KV MTP / STANDALONE with a draft
    path (``num_nextn_predict_layers`` when the config has it, an explicit 0 included, else the
    draft's layer count: :func:`model_facts.upstream_reserved_layers`, the same rule), and
    ``dflash_draft_num_layers`` by the release's ``parse_dflash_draft_config``."""
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
    """The runner's ``_profile_available_bytes`` answering ``available_bytes`` (what the
    release's own profile would read on the planned device), and only for this runner."""
    runner._profile_available_bytes = lambda _pre_model_load_memory: available_bytes
    try:
        yield
    finally:
        del runner._profile_available_bytes


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
    """Stock's plan by the installed release's own sizing on the unloaded target runner:
    ``_resolve_memory_pool_config`` (configurator, token constraints, request count) with the
    profiled budget answered by ``f x free`` minus what this release has resident when the
    target profiles (both models' weights, the draft's duplicate embed/lm_head still held;
    a frozen-KV MTP draft loads after the target's pool); the cell is the configurator's
    ``_cell_size``. A budget below one token is reported as 0 tokens, not refused."""
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
    """sglang 0.5.14 / 0.5.15: 0.5.13.x's parser and speculative hook, the release's own
    fraction heuristic, KV dtype and pool code (module docstring)."""

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


def stock_beside(plan: OfflinePlan) -> StockBeside | None:
    """The report in this generation's environment: the installed release's stock column (its
    own sizing, ``plan.release_stock``) beside this package's. None where the plan ran in
    another release's environment (``--sglang-version 0.5.14`` on 0.5.13.x): that report is
    the three modelled columns, 0.5.14's rule among them."""
    if plan.release_stock is None:
        return None
    return StockBeside(base=plan, stock=plan.release_stock, release=installed_release())
