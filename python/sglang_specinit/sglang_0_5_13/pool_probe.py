"""Price a runner's KV pool by building it: SGLang's own pool code at a few tiny sizes.

Used by the runtime sizing (sglang 0.5.13.x) for the target and every draft runner, before the
target pool is sized. ``ModelRunner._apply_memory_pool_config`` (SGLang's own method, the one
the real allocation goes through) runs on the live runner with tiny configs; the bytes of the
tensors the resulting KV pool owns are read and the runner is put back exactly as it was. A KV
pool's bytes are linear in the token counts its config gives it, so a few sizes give the exact
bytes per full-attention token, per sliding-window token and the fixed part (padding pages,
page-granular index buffers), for whatever pool class SGLang picks: MHA/GQA, MLA, DSA with its
FP8 layout, FP4 with scales, hybrid SWA, the one full-attention layer of a mamba/GDN draft,
any KV dtype (``float8_e4m3fnuz`` included). Nothing is derived from a parallel table.

The probe pools are freed before free memory is profiled; they are page-sized, so their peak
is negligible next to the weights already resident.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Iterator
from typing import Any

from sglang_specinit.budget import BudgetError, MeasuredKVSpec

# Token counts are multiples of the page size: every pool class allocates whole pages.
PROBE_PAGES = (2, 4)
PROBE_REQUESTS = 1

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
_MISSING = object()
_POOL_MODULE_PREFIX = "sglang.srt.mem_cache"


def owned_storages(root: Any) -> dict[int, int]:
    """data_ptr -> bytes of every tensor storage reachable from a pool object.

    Walks attributes, lists, tuples and dicts, descending only into SGLang memory-pool objects
    (``sglang.srt.mem_cache``), so references to runners or models are never followed.
    """
    import torch

    storages: dict[int, int] = {}
    seen: set[int] = set()
    stack = [root]
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif type(value).__module__.startswith(_POOL_MODULE_PREFIX) and hasattr(value, "__dict__"):
            stack.extend(vars(value).values())
    return storages


def kv_pool_bytes_of(runner: Any) -> int:
    """Bytes of the runner's KV pool, not counting what its request pool owns (mamba state)."""
    kv = owned_storages(runner.token_to_kv_pool)
    requests = owned_storages(runner.req_to_token_pool)
    return sum(size for ptr, size in kv.items() if ptr not in requests)


@contextlib.contextmanager
def _runner_restored(runner: Any) -> Iterator[None]:
    saved = {name: runner.__dict__.get(name, _MISSING) for name in _RUNNER_ATTRS}
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is _MISSING:
                runner.__dict__.pop(name, None)
            else:
                setattr(runner, name, value)


@contextlib.contextmanager
def _pool_logs_quiet() -> Iterator[None]:
    """The pool classes log each allocation at INFO; the probe's are noise."""
    pool_logger = logging.getLogger(_POOL_MODULE_PREFIX)
    level = pool_logger.level
    pool_logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        pool_logger.setLevel(level)


def _build_and_measure(runner: Any, full_tokens: int, swa_tokens: int) -> int:
    from sglang.srt.model_executor.pool_configurator import MemoryPoolConfig

    config = MemoryPoolConfig(
        max_total_num_tokens=full_tokens,
        max_running_requests=PROBE_REQUESTS,
        full_max_total_num_tokens=full_tokens,
        swa_max_total_num_tokens=swa_tokens,
    )
    with _runner_restored(runner):
        # A probe owns every pool it builds; the shared ones come in the pool phase.
        runner.req_to_token_pool = None
        runner.token_to_kv_pool_allocator = None
        runner._apply_memory_pool_config(config)
        measured = kv_pool_bytes_of(runner)
    return measured


def measure_kv_pool(
    runner: Any, swa_full_tokens_ratio: float = 1.0, ratio_applies: bool = False
) -> MeasuredKVSpec:
    """The KV pool ``runner`` would allocate, priced by building it at tiny sizes.

    ``swa_full_tokens_ratio`` / ``ratio_applies`` say how the target's config splits a token
    count into full and sliding-window tokens (a draft's pool follows the target's config).
    """
    page = int(runner.page_size)
    small, large = (pages * page for pages in PROBE_PAGES)
    with _pool_logs_quiet():
        base = _build_and_measure(runner, small, small)
        more_full = _build_and_measure(runner, large, small)
        more_swa = _build_and_measure(runner, small, large)
        more_both = _build_and_measure(runner, large, large)
    gc.collect()
    step = large - small
    full_bytes, full_rest = divmod(more_full - base, step)
    swa_bytes, swa_rest = divmod(more_swa - base, step)
    if full_rest or swa_rest or more_both - base != (more_full - base) + (more_swa - base):
        raise BudgetError(
            f"sglang-specinit: the KV pool of {type(runner.model).__name__} does not grow "
            f"linearly with its token counts ({base}, {more_full}, {more_swa}, {more_both} B at "
            f"{small}/{large} tokens), so it cannot be priced; set SGLANG_SPECINIT_DISABLE=1"
        )
    fixed = base - full_bytes * small - swa_bytes * small
    return MeasuredKVSpec(
        full_bytes_per_token=full_bytes,
        swa_bytes_per_token=swa_bytes,
        fixed_bytes=fixed,
        swa_full_tokens_ratio=swa_full_tokens_ratio,
        ratio_applies=ratio_applies,
    )
