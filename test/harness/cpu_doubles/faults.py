"""Fault-injection test doubles: make one rank's draft fail, or hold phase 3 mid-allocation."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from harness.reports.scheduler_report import _INIT_MEMORY_POOL, write_report

FAIL_DRAFT_RANK_ENV = "SPECINIT_TEST_FAIL_DRAFT_ON_TP_RANK"
PAUSE_DRAFT_POOL_ENV = "SPECINIT_TEST_PAUSE_DRAFT_POOL_S"

_LOAD_MODEL = "sglang.srt.model_executor.model_runner.ModelRunner.load_model"
# 0.5.23 has no KV-cache mixin: each runner allocates its pools in alloc_memory_pool.
_ALLOC_MEMORY_POOL_0_5_23 = "sglang.srt.model_executor.model_runner.ModelRunner.alloc_memory_pool"


class InjectedDraftLoadError(OSError):
    """Raised by the fault double in place of the draft's weight loading on one rank."""


def failing_draft_load(original: Callable[..., Any], runner: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``ModelRunner.load_model``: the draft of the chosen TP rank fails to load."""
    from harness.gpu.storage_identity import runner_tp_rank

    rank = int(os.environ[FAIL_DRAFT_RANK_ENV])
    if runner.is_draft_worker and runner_tp_rank(runner) == rank:
        marker = {"pid": os.getpid(), "wall_time": time.time()}
        write_report(marker, f"draft-failure-rank{rank}.json")
        raise InjectedDraftLoadError(
            f"[fault double] draft weights of {runner.model_config.model_path} unreadable on "
            f"tp rank {rank}"
        )
    return original(runner, *args, **kwargs)


def paused_draft_pool(original: Callable[..., Any], runner: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``init_memory_pool``: hold a draft runner's pool allocation for a while."""
    if runner.is_draft_worker:
        seconds = float(os.environ[PAUSE_DRAFT_POOL_ENV])
        write_report({"wall_time": time.time()}, f"draft-pool-paused-{os.getpid()}.json")
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
