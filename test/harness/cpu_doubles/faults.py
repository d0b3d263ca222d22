"""Fault-injection test doubles: make one rank's draft fail, or hold phase 3 mid-allocation."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FAIL_DRAFT_RANK_ENV = "SPECINIT_TEST_FAIL_DRAFT_ON_TP_RANK"
PAUSE_DRAFT_POOL_ENV = "SPECINIT_TEST_PAUSE_DRAFT_POOL_S"
REPORT_DIR_ENV = "SPECINIT_TEST_REPORT_DIR"

_LOAD_MODEL = "sglang.srt.model_executor.model_runner.ModelRunner.load_model"
_INIT_MEMORY_POOL = (
    "sglang.srt.model_executor.model_runner_kv_cache_mixin.ModelRunnerKVCacheMixin.init_memory_pool"
)
# 0.5.23 has no KV-cache mixin: each runner allocates its pools in alloc_memory_pool.
_ALLOC_MEMORY_POOL_0_5_23 = "sglang.srt.model_executor.model_runner.ModelRunner.alloc_memory_pool"


class InjectedDraftLoadError(OSError):
    """Raised by the fault double in place of the draft's weight loading on one rank."""


def _mark(name: str, payload: dict[str, Any]) -> None:
    directory = os.environ.get(REPORT_DIR_ENV)
    if directory:
        path = Path(directory) / name
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(payload))
        tmp.replace(path)


def runner_tp_rank(runner: Any) -> int:
    """A ModelRunner's TP rank: its attribute (0.5.13.x) or its process's runtime context
    (0.5.23, where ModelRunner keeps no rank of its own)."""
    rank = getattr(runner, "tp_rank", None)
    if rank is None:
        from sglang.srt.runtime_context import get_parallel

        rank = get_parallel().tp_rank
    return int(rank)


def failing_draft_load(original: Callable[..., Any], runner: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``ModelRunner.load_model``: the draft of the chosen TP rank fails to load."""
    rank = int(os.environ[FAIL_DRAFT_RANK_ENV])
    if runner.is_draft_worker and runner_tp_rank(runner) == rank:
        _mark(f"draft-failure-rank{rank}.json", {"pid": os.getpid(), "wall_time": time.time()})
        raise InjectedDraftLoadError(
            f"[fault double] draft weights of {runner.model_config.model_path} unreadable on "
            f"tp rank {rank}"
        )
    return original(runner, *args, **kwargs)


def paused_draft_pool(original: Callable[..., Any], runner: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``init_memory_pool``: hold a draft runner's pool allocation for a while."""
    if runner.is_draft_worker:
        seconds = float(os.environ[PAUSE_DRAFT_POOL_ENV])
        _mark(f"draft-pool-paused-{os.getpid()}.json", {"wall_time": time.time()})
        time.sleep(seconds)
    return original(runner, *args, **kwargs)


def fault_hooks() -> list[tuple[str, Callable[..., Any], str]]:
    """The doubles whose environment variable is set: (target, hook, HookType name)."""
    hooks: list[tuple[str, Callable[..., Any], str]] = []
    if os.environ.get(FAIL_DRAFT_RANK_ENV):
        hooks.append((_LOAD_MODEL, failing_draft_load, "AROUND"))
    if os.environ.get(PAUSE_DRAFT_POOL_ENV):
        from harness.launch.sglang_release import runs_0_5_23

        target = _ALLOC_MEMORY_POOL_0_5_23 if runs_0_5_23() else _INIT_MEMORY_POOL
        hooks.append((target, paused_draft_pool, "AROUND"))
    return hooks
