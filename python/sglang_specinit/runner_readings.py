"""What a live scheduler's runners hold, read the same way on every phased-init release."""

from __future__ import annotations

from typing import Any

from sglang_specinit.budget import GIB
from sglang_specinit.live_sizing import DraftDescription, storage_bytes


def kv_pool_allocated_bytes(runner: Any) -> int:
    pool = getattr(runner, "token_to_kv_pool", None)
    if pool is None or not hasattr(pool, "get_kv_size_bytes"):
        return 0
    sizes = pool.get_kv_size_bytes()
    return int(sum(sizes)) if isinstance(sizes, tuple) else int(sizes)


def draft_unshared_storages(scheduler: Any, description: DraftDescription) -> dict[Any, int]:
    target = storage_bytes([scheduler.tp_worker.model_runner.model])
    return storage_bytes([r.model for r in description.weight_runners], target)


def draft_duplicate_bytes(scheduler: Any, description: DraftDescription) -> int:
    """Across the early binding, the difference is what stock holds twice while profiling."""
    return sum(draft_unshared_storages(scheduler, description).values())


def rank_free_at_sizing(runner: Any) -> int:
    """This rank's own free memory just before SGLang's all-rank reading; nothing stays
    allocated in between, so on the tightest rank the two agree."""
    from sglang.srt.utils import common  # the module attribute, so hooks on it apply

    return int(common.get_available_gpu_memory(runner.device, runner.gpu_id) * GIB)
