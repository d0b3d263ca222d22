"""Whether a draft's embed/lm_head are the target's own storage when the KV pools are sized."""

from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

IDENTITY_ENV = "SPECINIT_TEST_STORAGE_IDENTITY"
IDENTITY_DIR_ENV = "SPECINIT_TEST_IDENTITY_DIR"
POOL, AFTER_INIT = "pool", "after_init"
_RUNNER = "sglang.srt.model_executor.model_runner.ModelRunner"
_SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
# Names that say a tensor is an embedding or an output head (reported even when not shared,
# so a failure names the draft's own copy).
_EMBED_OR_HEAD = ("embed", "lm_head")
_recorded_pool = False


def _runners() -> list[Any]:
    module = sys.modules.get("sglang.srt.model_executor.model_runner")
    if module is None:
        return []
    cls = module.ModelRunner
    found = [o for o in gc.get_objects() if isinstance(o, cls) and getattr(o, "model", None)]

    def order(r: Any) -> tuple[bool, int]:  # the target first
        return bool(getattr(r, "is_draft_worker", False)), getattr(r, "draft_model_idx", None) or 0

    return sorted(found, key=order)


def runner_tp_rank(runner: Any) -> int | None:
    """A runner's TP rank: its attribute (0.5.13.x), else 0.5.23's ``runtime_context``."""
    rank = getattr(runner, "tp_rank", None)
    if rank is not None:
        return int(rank)
    try:
        from sglang.srt.runtime_context import get_parallel

        return int(get_parallel().tp_rank)
    except (ImportError, AttributeError, RuntimeError, ValueError, TypeError):
        return None


def _storage_ptr(tensor: Any) -> int | None:
    try:
        ptr = tensor.untyped_storage().data_ptr()
    except Exception:  # storage-less tensor subclasses
        return None
    return ptr or None


def _named(model: Any) -> Iterable[tuple[str, Any]]:
    yield from model.named_parameters(remove_duplicate=False)
    yield from model.named_buffers(remove_duplicate=False)


def bindings(runners: list[Any]) -> dict[str, Any]:
    """``{"drafts": n, "shared": {"draft<i>/<name>": "<target name>"}, "own": [...]}``: the
    draft tensors sharing a target tensor's storage, and its embed/lm_head that do not."""
    targets = [r for r in runners if not getattr(r, "is_draft_worker", False)]
    drafts = [r for r in runners if getattr(r, "is_draft_worker", False)]
    owners: dict[int, str] = {}
    for runner in targets[:1]:
        for name, tensor in _named(runner.model):
            ptr = _storage_ptr(tensor)
            if ptr is not None:
                owners.setdefault(ptr, name)
    shared: dict[str, str] = {}
    own: list[str] = []
    for index, runner in enumerate(drafts):
        for name, tensor in _named(runner.model):
            key = f"draft{index}/{name}"
            owner = owners.get(_storage_ptr(tensor) or -1)
            if owner is not None:
                shared[key] = owner
            elif any(word in name for word in _EMBED_OR_HEAD):
                own.append(key)
    return {"drafts": len(drafts), "shared": shared, "own": sorted(own)}


def _write(point: str) -> None:
    directory = os.environ.get(IDENTITY_DIR_ENV)
    if not directory:
        return
    runners = _runners()
    rank = runner_tp_rank(runners[0]) if runners else None
    record = {"point": point, "pid": os.getpid(), "tp_rank": rank, **bindings(runners)}
    with open(Path(directory) / f"storage-identity-{os.getpid()}.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


def before_pool(runner: Any, *args: Any, **kwargs: Any) -> None:
    """BEFORE hook where the target's pool is sized: snapshot at the first one."""
    global _recorded_pool
    if _recorded_pool or getattr(runner, "is_draft_worker", False):
        return
    _recorded_pool = True
    _write(POOL)


def before_get_init_info(scheduler: Any, *args: Any, **kwargs: Any) -> None:
    _write(AFTER_INIT)


_registered = False


def pool_method() -> str:
    """The ``ModelRunner`` method that allocates a KV pool in the installed release."""
    from harness.launch.sglang_release import sglang_release

    return "init_memory_pool" if sglang_release()[:3] == (0, 5, 13) else "alloc_memory_pool"


def register_identity_hooks() -> None:
    """Register the two snapshot hooks with SGLang's ``HookRegistry`` once (see ``pool_method``)."""
    global _registered
    if _registered:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookSource, HookType

    from harness.launch.sglang_release import sglang_release

    # Chosen by release, not by looking at ModelRunner: importing it here, inside SGLang's own
    # first import (hook_registry is imported early), would be circular.
    configurator = "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator"
    pool_at = f"{_RUNNER}.{pool_method()}"
    if sglang_release()[:3] >= (0, 5, 16):
        pool_at = f"{configurator}._profile_available_bytes"
    source = HookSource(plugin_name="specinit-test-storage-identity", dist_name=None)
    HookRegistry.register(pool_at, before_pool, HookType.BEFORE, source=source)
    HookRegistry.register(
        f"{_SCHEDULER}.get_init_info", before_get_init_info, HookType.BEFORE, source=source
    )
    _registered = True


def read_snapshots(directory: Path) -> list[dict[str, list[dict[str, Any]]]]:
    out = []
    for path in sorted(directory.glob("storage-identity-*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines() if line]
        by_point: dict[str, list[dict[str, Any]]] = {}
        for record in records:
            by_point.setdefault(record["point"], []).append(record)
        if by_point:
            out.append(by_point)
    return out


def identity_problems(
    snapshots: Mapping[str, list[Mapping[str, Any]]],
    stock_after_init: Mapping[str, Any] | None,
) -> list[str]:
    pool = (snapshots.get(POOL) or [None])[0]
    after = (snapshots.get(AFTER_INIT) or [None])[-1]
    if after is None:
        return ["no after-init snapshot: the scheduler never finished its init"]
    if pool is None:
        return ["no pool-time snapshot: the target's KV pool was never allocated"]
    problems = []
    if stock_after_init is not None and dict(after["shared"]) != dict(stock_after_init["shared"]):
        problems.append(
            "after init the draft shares "
            f"{_pairs(after['shared'])} with the target, stock shares "
            f"{_pairs(stock_after_init['shared'])}"
        )
    if pool["drafts"] < after["drafts"]:
        problems.append(
            f"when the target's KV pool was sized {pool['drafts']} of {after['drafts']} draft "
            "runner(s) existed: their weights were not in the sizing"
        )
    missing = {k: v for k, v in after["shared"].items() if pool["shared"].get(k) != v}
    if missing:
        problems.append(
            f"when the target's KV pool was sized, {_pairs(missing)} were still the draft's own "
            f"storage (draft tensors of their own then: {pool['own'] or 'none'}); they are the "
            "target's only after init, so the budget was sized with a duplicate resident"
        )
    return problems


def _pairs(shared: Mapping[str, str]) -> str:
    return ", ".join(f"{k} = target/{v}" for k, v in sorted(shared.items())) or "nothing"


def launch_problems(directory: Path, stock_directory: Path | None) -> list[str]:
    """Every plugin-on scheduler process's problems, against stock's of the same TP rank."""
    stock_processes = read_snapshots(stock_directory) if stock_directory is not None else []
    stock = {_rank(s): s[AFTER_INIT][-1] for s in stock_processes if s.get(AFTER_INIT)}
    processes = read_snapshots(directory)
    if not processes:
        return [f"no storage-identity records in {directory}"]
    found = []
    for snaps in processes:
        rank = _rank(snaps)
        problems = identity_problems(snaps, stock.get(rank) if stock_directory else None)
        found += [f"TP rank {rank}: {p}" for p in problems]
    return found


def _rank(snapshots: Mapping[str, list[Mapping[str, Any]]]) -> Any:
    first = next(iter(snapshots.values()))[0]
    return first.get("tp_rank")
