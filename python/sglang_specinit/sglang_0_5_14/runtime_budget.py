"""Size a speculative target's KV pool with the draft priced exactly (0.5.14 / 0.5.15): every
step of ``_resolve_memory_pool_config`` stays but the token count, which ``budget.plan_pools``
takes from pools built on the live runners (:mod:`.pool_probe`)."""

from __future__ import annotations

import logging
import time
from typing import Any

from sglang_specinit.compat import installed_sglang_version
from sglang_specinit.live_sizing import plan_from_readings
from sglang_specinit.patch_table import PatchTable
from sglang_specinit.phased.sizing_state import Prices, TargetSizing, active_sizing, priced_readings
from sglang_specinit.pool_measure import runner_token_split
from sglang_specinit.sglang_0_5_14 import pool_probe

logger = logging.getLogger(__name__)

MODULE = "sglang.srt.model_executor.model_runner_kv_cache_mixin"
POOL_CONFIGURATOR = "sglang.srt.model_executor.pool_configurator"
MIXIN = "ModelRunnerKVCacheMixin"

patch = PatchTable(MODULE)

# Configurators whose calculate_pool_sizes_from_max_tokens only splits the count planned here.
PRICED_CONFIGURATORS = ("DefaultPoolConfigurator", "HybridSWAPoolConfigurator")


@patch.around(f"{MIXIN}._resolve_memory_pool_config", params=("pre_model_load_memory",))
@patch.calls(
    *(
        f"{MIXIN}.{name}"
        for name in (
            "_profile_available_bytes",
            "_apply_token_constraints",
            "_resolve_max_num_reqs",
            "_apply_memory_pool_config",
            "_init_pools",
        )
    )
)
@patch.calls(
    "MemoryPoolConfig",
    "create_memory_pool_configurator",
    "DefaultPoolConfigurator.calculate_pool_sizes_from_max_tokens",
    "HybridSWAPoolConfigurator.calculate_pool_sizes_from_max_tokens",
    module=POOL_CONFIGURATOR,
)
def resolve_memory_pool_config(original: Any, self: Any, pre_model_load_memory: float) -> Any:
    sizing = active_sizing()
    if sizing is None or self.is_draft_worker or sizing.plan is not None:
        return original(self, pre_model_load_memory)
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    configurator = create_memory_pool_configurator(self)
    kind = type(configurator).__name__
    if kind not in PRICED_CONFIGURATORS:
        logger.warning(
            "[specinit] stock sglang %s KV sizing (draft priced at the target's geometry): "
            "%s pools are not priced by sglang-specinit",
            installed_sglang_version() or "?",
            kind,
        )
        return original(self, pre_model_load_memory)
    try:
        # Priced before free memory is profiled: the probe pools are gone by then.
        start = time.perf_counter()
        split = runner_token_split(self)
        prices = (
            pool_probe.measure_runner(self, split),
            tuple(pool_probe.measure_runner(r, split) for r in sizing.draft.pool_runners),
            0,  # launch_policy keeps fixed-size draft pools on stock sizing
        )
        sizing.pricing_seconds = time.perf_counter() - start
    except Exception as exc:  # a pool the release cannot build tiny is not ours to size
        logger.warning(
            "[specinit] stock sglang %s KV sizing (draft priced at the target's geometry): "
            "the pools of this launch could not be priced by building them (%s: %s)",
            installed_sglang_version() or "?",
            type(exc).__name__,
            exc,
        )
        return original(self, pre_model_load_memory)
    return _resolve(self, configurator, sizing, pre_model_load_memory, prices)


def _resolve(
    runner: Any,
    configurator: Any,
    sizing: TargetSizing,
    pre_model_load_memory: float,
    prices: Prices,
) -> Any:
    available_bytes = runner._profile_available_bytes(pre_model_load_memory)
    server_args = runner.server_args
    readings = priced_readings(
        sizing,
        prices,
        runner.model,
        # What stock reserves for the draft, for the report only.
        reserved_draft_layers=getattr(runner, "eagle_draft_num_layers", None),
        pre_model_load_memory=pre_model_load_memory,
        available_bytes=available_bytes,
        mem_fraction_static=runner.mem_fraction_static,
        page_size=server_args.page_size,
        context_len=runner.model_config.context_len,
        max_total_tokens=server_args.max_total_tokens,
        max_running_requests=server_args.max_running_requests,
        dp_size=runner.dp_size,
    )
    inputs, plan = plan_from_readings(readings)
    sizing.inputs, sizing.plan = inputs, plan
    tokens = runner._apply_token_constraints(plan.tokens)
    config = configurator.calculate_pool_sizes_from_max_tokens(tokens, inputs.page_size)
    config.max_running_requests = runner._resolve_max_num_reqs(config.max_total_num_tokens)
    # 0.5.15 only.
    finalize = getattr(configurator, "finalize_with_max_running_requests", None)
    if finalize is not None:
        config = finalize(config)
    config.mem_fraction_static = runner.server_args.mem_fraction_static
    return config


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
