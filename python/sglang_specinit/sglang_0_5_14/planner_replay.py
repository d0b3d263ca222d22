"""The server-args replay for sglang 0.5.14 / 0.5.15 (the ``sglang_0_5_14`` adapter's releases).

These releases keep 0.5.13's dataclass ``ServerArgs`` (its ``__post_init__`` resolves every
field) and 0.5.13's speculative hook module, so the replay is 0.5.13.x's
(:class:`~sglang_specinit.planner.field_replay.FieldServerArgsReplay`: the release's own parser,
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

The pools are built on this host (:func:`pricing_device`); on cpu the KV pool's Triton warm-up
copy, which copies slot 0 onto itself and allocates nothing, is skipped for the pricing call
(:func:`kv_warm_up_copy_skipped`).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from sglang_specinit.model_facts import kv_dtype_name, own_hf_config
from sglang_specinit.planner.field_replay import (
    FieldServerArgsReplay,
    attention_tp_size,
    planned_cpu_engine,
    resolve_speculative,
)
from sglang_specinit.planner.gpus import DeviceSpec
from sglang_specinit.planner.inputs import PlanError
from sglang_specinit.planner.replay import (
    ModelledColumn,
    PoolPrices,
    ResolvedLaunch,
    build_model_config,
    installed_release,
    refuse_unpriced_model,
    released,
)
from sglang_specinit.planner.unloaded_runner import (
    attention_tp_size_answering,
    kv_warm_up_copy_skipped,
    pricing_device,
    unloaded_runner,
)


def auto_mem_fraction_static(server_args: Any, capacity_mib: float) -> float:
    """The ``--mem-fraction-static`` the installed release picks when the user passes none:
    its ``_handle_cuda_graph_config`` (the graph settings the heuristic reads) then
    ``_handle_gpu_memory_settings(capacity_mib)``, on a copy."""
    from sglang.srt.server_args import ServerArgs

    trial = copy.deepcopy(server_args)
    released(ServerArgs._handle_cuda_graph_config)(trial)
    # Its only other effect is an environment default for symmetric memory; keep ours clean.
    trial.enable_symm_mem = False
    released(ServerArgs._handle_gpu_memory_settings)(trial, capacity_mib)
    return float(trial.mem_fraction_static)


class Replay0514(FieldServerArgsReplay):
    """sglang 0.5.14 / 0.5.15: 0.5.13.x's parser and speculative hook, the release's own
    fraction heuristic, KV dtype and pool code (module docstring)."""

    modelled_columns = (
        ModelledColumn("0.5.13.post1", "stock 0.5.13.post1", "stock_0_5_13", fraction="stock"),
        ModelledColumn("0.5.14", "upstream 0.5.14", "upstream_0_5_14"),
    )

    @property
    def release(self) -> str:
        return installed_release()

    @property
    def printable_releases(self) -> tuple[str, ...]:
        return (self.release,)

    def resolve(self, server_args: Any, device: DeviceSpec) -> ResolvedLaunch:
        from sglang.srt.configs.model_config import ModelConfig

        with planned_cpu_engine(server_args.device):
            target_mc = build_model_config(ModelConfig.from_server_args, server_args)
            # A draft read from the same checkpoint rewrites the cached hf config in place.
            own_hf_config(target_mc)
            # get_model_config() caches here; the heuristic and the speculative hook reuse it.
            server_args.model_config = target_mc
            refuse_unpriced_model(target_mc)
            fraction = server_args.mem_fraction_static
            if fraction is None:
                fraction = auto_mem_fraction_static(server_args, device.capacity_mib)
            server_args.mem_fraction_static = float(fraction)
            spec_args = resolve_speculative(server_args)
            attn_tp = attention_tp_size(spec_args)
            if int(spec_args.pp_size) > 1 and spec_args.speculative_algorithm is not None:
                # The adapter keeps stock sizing there (launch_policy): nothing of ours to plan.
                raise PlanError(
                    f"--pp-size {spec_args.pp_size} with --speculative-algorithm "
                    f"{spec_args.speculative_algorithm}: sglang-specinit keeps stock sizing for "
                    f"pipeline parallelism on sglang {installed_release()}; drop --pp-size"
                )
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
        split = pool_probe.target_split(target)
        on_cpu = pricing_device() == "cpu"
        with (
            attention_tp_size_answering(launch.attn_tp_size),
            kv_warm_up_copy_skipped() if on_cpu else contextlib.nullcontext(),
        ):
            target_kv = pool_probe.measure_runner(target, split)
            draft_pools = tuple(pool_probe.measure_runner(r, split) for r in drafts)
        return PoolPrices(target_kv=target_kv, draft_pools=draft_pools, draft_fixed_bytes=0)


REPLAY = Replay0514()
