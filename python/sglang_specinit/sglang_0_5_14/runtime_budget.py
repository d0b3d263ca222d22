"""Size a speculative target's KV pool with the draft priced exactly (sglang 0.5.14 / 0.5.15).

Wraps ``ModelRunnerKVCacheMixin._resolve_memory_pool_config``
(``model_executor.model_runner_kv_cache_mixin``).

These releases turn the profiled budget into tokens with ``create_memory_pool_configurator(
runner).calculate_pool_sizes``, whose ``DefaultPoolConfigurator`` scales the target's cell by
``1 + eagle_draft_num_layers / num_layers`` (``pool_configurator.py:131-145`` in 0.5.14): the
draft's layers at the *target's* geometry, and nothing when the draft's config says
``num_nextn_predict_layers: 0``; ``HybridSWAPoolConfigurator`` adds no draft term in 0.5.14
and ``eagle_draft_num_layers`` full layers of the target's geometry in 0.5.15
(``pool_configurator.py:319-349``). This
hook keeps every other step of SGLang's own method and swaps only that division: the
free-memory reading and its checks (``_profile_available_bytes``: slack, mamba reservation,
the "weights leave no memory" error), the user cap and PP sync (``_apply_token_constraints``),
the pool split (``calculate_pool_sizes_from_max_tokens``) and ``_resolve_max_num_reqs``. The
token count comes from ``budget.plan_pools`` (the function the offline planner runs), every
pool priced by building it with the release's own pool code on the live runners
(:mod:`.pool_probe`). A pool that cannot be priced so keeps stock sizing, with one WARNING.
The hook acts only while the scheduler hook (:mod:`.scheduler`) has a sizing active for this
process's target; otherwise it is stock.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sglang_specinit.live_sizing import (
    SizingReadings,
    plan_from_readings,
)
from sglang_specinit.patch_table import PatchTable
from sglang_specinit.phased.sizing_state import Prices, TargetSizing, active_sizing, priced_readings
from sglang_specinit.sglang_0_5_14 import pool_probe

logger = logging.getLogger(__name__)

MODULE = "sglang.srt.model_executor.model_runner_kv_cache_mixin"
POOL_CONFIGURATOR = "sglang.srt.model_executor.pool_configurator"
MIXIN = "ModelRunnerKVCacheMixin"

patch = PatchTable(MODULE)

# The configurators whose calculate_pool_sizes_from_max_tokens only splits a token count
# (page-aligned; full/SWA by the ratio): a count planned here goes through them unchanged.
PRICED_CONFIGURATORS = ("DefaultPoolConfigurator", "HybridSWAPoolConfigurator")


@patch.around(f"{MIXIN}._resolve_memory_pool_config", params=("pre_model_load_memory",))
# What this hook and the probe call (read, not patched): the runner's own sizing steps and
# its pool building (pool_probe), the configurator's split.
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
    """AROUND hook: a speculative target's token count from ``budget.plan_pools``."""
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
            _release(),
            kind,
        )
        return original(self, pre_model_load_memory)
    try:
        # Priced before free memory is profiled: the probe pools are gone by then.
        start = time.perf_counter()
        prices = price_pools(self, sizing)
        sizing.pricing_seconds = time.perf_counter() - start
    except Exception as exc:  # a pool the release cannot build tiny is not ours to size
        logger.warning(
            "[specinit] stock sglang %s KV sizing (draft priced at the target's geometry): "
            "the pools of this launch could not be priced by building them (%s: %s)",
            _release(),
            type(exc).__name__,
            exc,
        )
        return original(self, pre_model_load_memory)
    return _resolve(self, configurator, sizing, pre_model_load_memory, prices)


def _release() -> str:
    from sglang_specinit.compat import installed_sglang_version

    return installed_sglang_version() or "?"


def price_pools(runner: Any, sizing: TargetSizing) -> Prices:
    """(target pool, draft pools, fixed-pool bytes), each priced by building it on the live
    runner with the release's own pool code (draft pools follow the target's token split)."""
    split = pool_probe.target_split(runner)
    return (
        pool_probe.measure_runner(runner, split),
        tuple(pool_probe.measure_runner(r, split) for r in sizing.draft.pool_runners),
        0,  # no fixed-size draft pool among the launches this adapter prices (launch_policy)
    )


def read_sizing(
    runner: Any,
    sizing: TargetSizing,
    pre_model_load_memory: float,
    available_bytes: int,
    prices: Prices,
) -> SizingReadings:
    """What the shared sizing path needs, read from the live target runner."""
    server_args = runner.server_args
    return priced_readings(
        sizing,
        prices,
        runner.model,
        # What stock reserves for the draft (ModelRunner.__init__, model_runner.py:429-456 in
        # 0.5.14), for the report only.
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


def _resolve(
    runner: Any,
    configurator: Any,
    sizing: TargetSizing,
    pre_model_load_memory: float,
    prices: Prices,
) -> Any:
    available_bytes = runner._profile_available_bytes(pre_model_load_memory)
    readings = read_sizing(runner, sizing, pre_model_load_memory, available_bytes, prices)
    inputs, plan = plan_from_readings(readings)
    sizing.inputs, sizing.plan = inputs, plan
    tokens = runner._apply_token_constraints(plan.tokens)
    config = configurator.calculate_pool_sizes_from_max_tokens(tokens, inputs.page_size)
    config.max_running_requests = runner._resolve_max_num_reqs(config.max_total_num_tokens)
    # 0.5.15 adds this step to its own method (pool_configurator.py:112, the identity for the
    # configurators priced here; model_runner_kv_cache_mixin.py:1319); 0.5.14 has none.
    finalize = getattr(configurator, "finalize_with_max_running_requests", None)
    if finalize is not None:
        config = finalize(config)
    config.mem_fraction_static = runner.server_args.mem_fraction_static
    return config


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
