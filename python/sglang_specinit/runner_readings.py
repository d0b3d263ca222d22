"""What a live scheduler's runners hold, read the same way on every phased-init release.

The KV bytes a runner's pool really allocated, the draft's weight storages that duplicate the
target's (before and after the early binding), and this rank's own free device memory as its
pools are about to be sized. Every scheduler of these releases keeps its target runner at
``scheduler.tp_worker.model_runner`` and its pool at ``runner.token_to_kv_pool``; SGLang is
imported only inside :func:`rank_free_at_sizing`.
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.budget import GIB
from sglang_specinit.live_sizing import DraftDescription, storage_bytes


def kv_pool_allocated_bytes(runner: Any) -> int:
    """Bytes of the KV buffers a runner really allocated (0 for a runner without a pool)."""
    pool = getattr(runner, "token_to_kv_pool", None)
    if pool is None or not hasattr(pool, "get_kv_size_bytes"):
        return 0
    sizes = pool.get_kv_size_bytes()
    return int(sum(sizes)) if isinstance(sizes, tuple) else int(sizes)


def draft_unshared_storages(scheduler: Any, description: DraftDescription) -> dict[Any, int]:
    """storage identity -> bytes of every draft weight storage not shared with the target."""
    target = storage_bytes([scheduler.tp_worker.model_runner.model])
    return storage_bytes([r.model for r in description.weight_runners], target)


def draft_duplicate_bytes(scheduler: Any, description: DraftDescription) -> int:
    """Bytes of draft weight storages not shared with the target (before/after binding).

    The difference across the early binding is what stock keeps resident twice while it
    profiles the target pool.
    """
    return sum(draft_unshared_storages(scheduler, description).values())


def rank_free_at_sizing(runner: Any) -> int:
    """This rank's own free device memory as its pools are about to be sized: one local
    reading (``distributed=False``), no collective.

    SGLang's own reading at sizing is an all-rank minimum (a MIN all-reduce over the world
    group when the launch has more than one rank); this is the rank's own value next to it.
    Taken just before SGLang's pool phase runs: between here and that reading nothing stays
    allocated (the early binding is done; the pricing probes are freed before SGLang
    profiles), so on the tightest rank the two agree.
    """
    from sglang.srt.utils import common  # the module attribute, so hooks on it apply

    return int(common.get_available_gpu_memory(runner.device, runner.gpu_id) * GIB)
