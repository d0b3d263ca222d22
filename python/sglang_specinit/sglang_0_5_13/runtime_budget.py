"""Size a speculative target's KV pool for target + draft from live SGLang objects (0.5.13): its
free-memory reading with the draft loaded, pools priced by :mod:`.pool_probe`, SGLang's split."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from sglang_specinit.budget import GIB, BudgetInputs, KVSpec, PoolPlan
from sglang_specinit.live_sizing import (
    DraftDescription,
    SizingReadings,
    draft_spec,
    plan_from_readings,
    storage_bytes,
)
from sglang_specinit.pool_measure import runner_token_split
from sglang_specinit.sglang_0_5_13.pool_probe import measure_kv_pool

logger = logging.getLogger(__name__)


def rank_free_bytes(runner: Any) -> int:
    """This rank's own free memory, beside SGLang's all-rank minimum (no collective)."""
    from sglang.srt.utils import common  # the module attribute, so hooks on it apply

    return int(common.get_available_gpu_memory(runner.device, runner.gpu_id) * GIB)


@dataclass(frozen=True)
class RankFreeMemory:
    rank_bytes: int
    all_rank_min_bytes: int


@dataclass
class SpeculativeSizing:
    algorithm: str
    draft: DraftDescription
    plan: PoolPlan | None = None
    inputs: BudgetInputs | None = None
    draft_pools: tuple[KVSpec, ...] = field(default_factory=tuple)
    # None where the all-rank minimum cannot be recovered from SGLang's reading (mamba state).
    free_at_sizing: RankFreeMemory | None = None

    def read_sizing(self, runner: Any, pre_model_load_memory: float) -> SizingReadings:
        server_args = runner.server_args
        page_size = server_args.page_size
        described = self.draft
        # Priced before free memory is read, so the probe pools are gone by then.
        split = runner_token_split(runner)
        target_kv = measure_kv_pool(runner, *split)
        self.draft_pools = tuple(measure_kv_pool(dr, *split) for dr in described.pool_runners)
        fixed_pools = sum(
            measure_kv_pool(dr, *split).pool_bytes(tokens, page_size)
            for dr, tokens in described.fixed_pools
        )
        # Read just before SGLang's all-rank reading, with nothing allocated in between.
        own_free = rank_free_bytes(runner)
        available_bytes = runner._profile_available_bytes(pre_model_load_memory)
        f = runner.mem_fraction_static
        if getattr(runner, "mambaish_config", None) is None:
            # _profile_available_bytes returns min_free_now - (1 - f) * min_free_before_load.
            min_free = available_bytes + int(pre_model_load_memory * (1 - f) * GIB)
            self.free_at_sizing = RankFreeMemory(own_free, min_free)
        target_storages = storage_bytes([runner.model])
        return SizingReadings(
            pre_model_load_memory_gb=pre_model_load_memory,
            mem_fraction_static=f,
            available_bytes=available_bytes,
            target_kv=target_kv,
            target_weight_bytes=sum(target_storages.values()),
            draft=draft_spec(described, self.draft_pools, fixed_pools, target_storages),
            page_size=page_size,
            context_len=runner.model_config.context_len,
            max_total_tokens=server_args.max_total_tokens,
            max_running_requests=server_args.max_running_requests,
            dp_size=runner.dp_size,
        )

    def resolve(self, runner: Any, pre_model_load_memory: float) -> Any:
        from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

        inputs, plan = plan_from_readings(self.read_sizing(runner, pre_model_load_memory))
        self.inputs, self.plan = inputs, plan
        tokens = runner._apply_token_constraints(plan.tokens)
        configurator = create_memory_pool_configurator(runner)
        config = configurator.calculate_pool_sizes_from_max_tokens(tokens, inputs.page_size)
        config.max_running_requests = runner._resolve_max_num_reqs(config.max_total_num_tokens)
        config.mem_fraction_static = inputs.mem_fraction_static
        return config

