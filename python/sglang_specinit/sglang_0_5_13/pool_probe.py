"""Price a runner's KV pool by building it: SGLang's own pool code at a few tiny sizes.

sglang 0.5.13 / 0.5.13.post1. Used by the runtime sizing for the target and every draft runner,
before the target pool is sized. ``ModelRunner._apply_memory_pool_config`` (SGLang's own method,
the one the real allocation goes through) runs on the live runner with tiny configs; the bytes
of the tensors the resulting KV pool owns are read (:mod:`sglang_specinit.pool_measure`, shared
with the 0.5.23 adapter; the build itself, :func:`~sglang_specinit.pool_measure.
runner_pool_storages`, with the 0.5.14 adapter) and the runner is put back exactly as it was.
The probe pools are freed before free memory is profiled; they are page-sized, so their peak is
negligible next to the weights already resident.
"""

from __future__ import annotations

import gc
from typing import Any

from sglang_specinit.budget import MeasuredKVSpec
from sglang_specinit.pool_measure import (
    measure_linear,
    model_name,
    runner_pool_storages,
)

# Attributes _apply_memory_pool_config / _init_pools set on the runner; restored afterwards.
_RUNNER_ATTRS = (
    "max_total_num_tokens",
    "max_running_requests",
    "full_max_total_num_tokens",
    "swa_max_total_num_tokens",
    "c4_max_total_num_tokens",
    "c128_max_total_num_tokens",
    "c4_state_pool_size",
    "c128_state_pool_size",
    "state_dtype",
    "req_to_token_pool",
    "token_to_kv_pool",
    "token_to_kv_pool_allocator",
)


def measure_kv_pool(
    runner: Any, swa_full_tokens_ratio: float = 1.0, ratio_applies: bool = False
) -> MeasuredKVSpec:
    """The KV pool ``runner`` would allocate, priced by building it at tiny sizes.

    ``swa_full_tokens_ratio`` / ``ratio_applies`` say how the target's config splits a token
    count into full and sliding-window tokens (a draft's pool follows the target's config).
    """
    price = measure_linear(
        lambda full, swa: runner_pool_storages(runner, full, swa, _RUNNER_ATTRS),
        int(runner.page_size),
        what=model_name(runner.model_config),
        swa_full_tokens_ratio=swa_full_tokens_ratio,
        ratio_applies=ratio_applies,
    )
    # 0.5.13's free-memory profile does not collect: the probe pools go before it reads.
    gc.collect()
    return price
