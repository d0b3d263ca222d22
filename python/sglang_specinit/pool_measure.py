"""Price a KV pool by building it with SGLang's own pool code at tiny sizes: its bytes are linear
in its (full, SWA) token counts, so four builds give its exact price."""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sglang_specinit.budget import BudgetError, MeasuredKVSpec

# Token counts are multiples of the page size: every pool class allocates whole pages.
PROBE_PAGES = (2, 4)
PROBE_REQUESTS = 1

_POOL_MODULE_PREFIX = "sglang.srt.mem_cache"

# (full tokens, sliding-window tokens) -> {storage path: bytes} of the pool built at them.
PoolBuilder = Callable[[int, int], dict[str, int]]


def _reachable(
    roots: Iterable[Any], stop_at: set[int]
) -> tuple[dict[str, tuple[int, int]], set[int]]:
    """({path: (data_ptr, bytes)}, pool object ids) reachable from ``roots``, entering only
    SGLang memory-pool objects; paths name the same buffer in pools built at other sizes."""
    import torch

    storages: dict[str, tuple[int, int]] = {}
    pools: set[int] = set()
    seen = set(stop_at)
    stack: list[tuple[str, Any]] = [("", root) for root in roots]
    while stack:
        path, value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            # The data pointer; on ``meta`` every pointer is 0, so the storage object itself.
            meta = storage.device.type == "meta"
            ptr = int(storage._cdata) if meta else int(storage.data_ptr())
            storages[path] = (ptr, storage.nbytes())
        elif isinstance(value, list | tuple):
            stack.extend((f"{path}.{i}", v) for i, v in enumerate(value))
        elif isinstance(value, dict):
            stack.extend((f"{path}.{k}", v) for k, v in value.items())
        elif type(value).__module__.startswith(_POOL_MODULE_PREFIX):
            pools.add(id(value))
            stack.extend((f"{path}.{k}", v) for k, v in _fields(value))
    return storages, pools


def _fields(value: Any) -> list[tuple[str, Any]]:
    fields = dict(vars(value)) if hasattr(value, "__dict__") else {}
    for cls in type(value).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name not in fields and hasattr(value, name):
                fields[name] = getattr(value, name)
    return list(fields.items())


def kv_pool_storages(kv_pool: Any, req_to_token_pool: Any, allocator: Any) -> dict[str, int]:
    """{path: bytes} of the storages ``kv_pool`` owns, not the request pool's or allocator's
    (sized elsewhere, and shared by a draft)."""
    kv, pool_objects = _reachable([kv_pool], set())
    others = {ptr for ptr, _ in _reachable([req_to_token_pool], set())[0].values()}
    others |= {ptr for ptr, _ in _reachable([allocator], pool_objects)[0].values()}
    # Views of one storage (K and V in one allocation) count once, under the first path.
    owned: dict[int, tuple[str, int]] = {}
    for path, (ptr, size) in sorted(kv.items()):
        if ptr not in others and ptr not in owned:
            owned[ptr] = (path, size)
    return dict(owned.values())


@contextlib.contextmanager
def pool_logs_quiet() -> Iterator[None]:
    pool_logger = logging.getLogger(_POOL_MODULE_PREFIX)
    level = pool_logger.level
    pool_logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        pool_logger.setLevel(level)


_MISSING = object()


@contextlib.contextmanager
def attributes_restored(obj: Any, names: Iterable[str]) -> Iterator[None]:
    saved = {name: obj.__dict__.get(name, _MISSING) for name in names}
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is _MISSING:
                obj.__dict__.pop(name, None)
            else:
                setattr(obj, name, value)


def runner_pool_storages(
    runner: Any, full_tokens: int, swa_tokens: int, runner_attrs: Iterable[str]
) -> dict[str, int]:
    """The KV storages ``runner`` builds with its own ``_apply_memory_pool_config``, for
    releases whose runner builds its pools; ``runner_attrs`` (what that method sets) restored."""
    from sglang.srt.model_executor.pool_configurator import MemoryPoolConfig

    config = MemoryPoolConfig(
        max_total_num_tokens=full_tokens,
        max_running_requests=PROBE_REQUESTS,
        full_max_total_num_tokens=full_tokens,
        swa_max_total_num_tokens=swa_tokens,
    )
    server_args = runner.server_args
    mamba_cache_size = server_args.max_mamba_cache_size
    with attributes_restored(runner, runner_attrs):
        runner.req_to_token_pool = None
        runner.token_to_kv_pool_allocator = None
        # Mamba state is reserved while profiling, not part of the KV price.
        server_args.max_mamba_cache_size = PROBE_REQUESTS
        try:
            runner._apply_memory_pool_config(config)
            return kv_pool_storages(
                runner.token_to_kv_pool,
                runner.req_to_token_pool,
                runner.token_to_kv_pool_allocator,
            )
        finally:
            server_args.max_mamba_cache_size = mamba_cache_size


def runner_token_split(runner: Any) -> tuple[float, bool]:
    """(swa_full_tokens_ratio, whether it applies) of a runner; draft pools share the target's.
    An all-SWA model gives its SWA pool every token."""
    ratio = float(runner.server_args.swa_full_tokens_ratio)
    applies = bool(runner.is_hybrid_swa) and bool(runner.model_config.full_attention_layer_ids)
    return ratio, applies


def measure_runner_pool(
    runner: Any, runner_attrs: Iterable[str], what: str, split: tuple[float, bool]
) -> MeasuredKVSpec:
    """The pools :func:`runner_pool_storages` builds, priced; collected before SGLang reads free
    memory (its profile does not collect)."""
    ratio, applies = split
    price = measure_linear(
        lambda full, swa: runner_pool_storages(runner, full, swa, runner_attrs),
        int(runner.page_size),
        what=what,
        swa_full_tokens_ratio=ratio,
        ratio_applies=applies,
    )
    gc.collect()
    return price


def model_name(model_config: Any) -> str:
    architectures = getattr(getattr(model_config, "hf_config", None), "architectures", None)
    return architectures[0] if architectures else type(model_config).__name__


def measure_linear(
    build: PoolBuilder,
    page_size: int,
    what: str,
    swa_full_tokens_ratio: float = 1.0,
    ratio_applies: bool = False,
) -> MeasuredKVSpec:
    """The pool ``build`` makes, priced from four builds; a non-linear pool is refused."""
    small, large = (pages * page_size for pages in PROBE_PAGES)
    with pool_logs_quiet():
        builds = [
            build(full, swa)
            for full, swa in ((small, small), (large, small), (small, large), (large, large))
        ]
    # The caller frees the probe pools before free memory is profiled.
    paths = set().union(*builds)
    scaling = {p for p in paths if len({b.get(p, 0) for b in builds}) > 1}
    base, more_full, more_swa, more_both = (sum(b.get(p, 0) for p in scaling) for b in builds)
    step = large - small
    full_bytes, full_rest = divmod(more_full - base, step)
    swa_bytes, swa_rest = divmod(more_swa - base, step)
    if full_rest or swa_rest or more_both - base != (more_full - base) + (more_swa - base):
        raise BudgetError(
            f"sglang-specinit: the KV pool of {what} does not grow linearly with its token "
            f"counts ({base}, {more_full}, {more_swa}, {more_both} B at {small}/{large} "
            "tokens), so it cannot be priced; set SGLANG_SPECINIT_DISABLE=1"
        )
    return MeasuredKVSpec(
        full_bytes_per_token=full_bytes,
        swa_bytes_per_token=swa_bytes,
        fixed_bytes=base - full_bytes * small - swa_bytes * small,
        swa_full_tokens_ratio=swa_full_tokens_ratio,
        ratio_applies=ratio_applies,
    )
