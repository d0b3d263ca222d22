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
Storages whose size does not follow the token counts (pointer and stride tables of a few
hundred bytes) are bookkeeping, not price; SGLang leaves them to the ``1 - f`` share too.

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


def _reachable(root: Any, stop_at: set[int]) -> tuple[dict[str, tuple[int, int]], set[int]]:
    """({path: (data_ptr, bytes)} of every tensor storage, ids of every pool object) reachable
    from ``root``: attributes, lists, tuples and dicts, descending only into SGLang memory-pool
    objects (``sglang.srt.mem_cache``), so references to runners or models are never followed;
    objects whose id is in ``stop_at`` are not entered. Paths (``full_kv_pool.k_buffer.3``)
    name the same buffer in pools built at different sizes."""
    import torch

    storages: dict[str, tuple[int, int]] = {}
    pools: set[int] = set()
    seen = set(stop_at)
    stack: list[tuple[str, Any]] = [("", root)]
    while stack:
        path, value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            storages[path] = (storage.data_ptr(), storage.nbytes())
        elif isinstance(value, list | tuple):
            stack.extend((f"{path}.{i}", v) for i, v in enumerate(value))
        elif isinstance(value, dict):
            stack.extend((f"{path}.{k}", v) for k, v in value.items())
        elif type(value).__module__.startswith(_POOL_MODULE_PREFIX) and hasattr(value, "__dict__"):
            pools.add(id(value))
            stack.extend((f"{path}.{k}", v) for k, v in vars(value).items())
    return storages, pools


def kv_pool_storages(runner: Any) -> dict[str, int]:
    """{path: bytes} of the storages the runner's KV pool owns: not what its request pool
    (mamba state) or its token allocator (free lists, the full-to-SWA index map) own, which are
    sized elsewhere (and a draft shares the target's)."""
    kv, pool_objects = _reachable(runner.token_to_kv_pool, set())
    others = {ptr for ptr, _ in _reachable(runner.req_to_token_pool, set())[0].values()}
    others |= {
        ptr for ptr, _ in _reachable(runner.token_to_kv_pool_allocator, pool_objects)[0].values()
    }
    return {path: size for path, (ptr, size) in kv.items() if ptr not in others}


def kv_pool_bytes_of(runner: Any) -> int:
    """Bytes of every storage the runner's KV pool owns (see :func:`kv_pool_storages`)."""
    return sum(kv_pool_storages(runner).values())


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


def _build_and_measure(runner: Any, full_tokens: int, swa_tokens: int) -> dict[str, int]:
    from sglang.srt.model_executor.pool_configurator import MemoryPoolConfig

    config = MemoryPoolConfig(
        max_total_num_tokens=full_tokens,
        max_running_requests=PROBE_REQUESTS,
        full_max_total_num_tokens=full_tokens,
        swa_max_total_num_tokens=swa_tokens,
    )
    server_args = runner.server_args
    mamba_cache_size = server_args.max_mamba_cache_size
    with _runner_restored(runner):
        # A probe owns every pool it builds; the shared ones come in the pool phase.
        runner.req_to_token_pool = None
        runner.token_to_kv_pool_allocator = None
        # A hybrid model's request pool holds mamba state for max_mamba_cache_size requests
        # (not priced here: SGLang reserves it itself while profiling). Keep the probe's tiny;
        # the value SGLang chose, if any, is put back right after.
        server_args.max_mamba_cache_size = PROBE_REQUESTS
        try:
            runner._apply_memory_pool_config(config)
            measured = kv_pool_storages(runner)
        finally:
            server_args.max_mamba_cache_size = mamba_cache_size
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
        builds = [
            _build_and_measure(runner, full, swa)
            for full, swa in ((small, small), (large, small), (small, large), (large, large))
        ]
    gc.collect()
    # Only storages whose size follows the token counts are the pool's price; constant-size
    # bookkeeping (pointer and stride tables, a few hundred bytes) is left to the 1 - f share,
    # as SGLang leaves it, so the planner can price the same pools from their configs.
    paths = set().union(*builds)
    scaling = {p for p in paths if len({build.get(p, 0) for build in builds}) > 1}
    base, more_full, more_swa, more_both = (
        sum(build.get(p, 0) for p in scaling) for build in builds
    )
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
