"""Shared helpers of the per-worker CPU tests (``test_workers_<name>.py``); no tests here."""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from harness.checkpoints.llama_family import DEFAULT_TARGET
from harness.checkpoints.llama_layout import TinyLlamaShape
from harness.launch.engine import DEFAULT_CAPACITY_BYTES, cpu_engine
from harness.reports import device_probe
from harness.reports.report_reading import (
    PHASES,
    REPORT_DIR_ENV,
    F,
    kv_buffer_bytes,
    kv_spec,
    meter_budget,
    read_breakdown,
    reading_seqs,
    runner,
)
from sglang_specinit import budget

CAPACITY = DEFAULT_CAPACITY_BYTES
STOCK_WARNING = "[specinit] stock speculative init (draft memory NOT budgeted)"
# A stock launch overshoots f x capacity by at least this much with the tiny models used here.
MIN_STOCK_OVERSHOOT = 1.01
DEFAULT_TARGET_KV = kv_spec(DEFAULT_TARGET)

T = TypeVar("T")


@dataclass
class Launch:
    """Everything one Engine launch left behind, collected before it was shut down."""

    plugin: bool
    report: dict[str, Any]
    breakdown: dict[str, Any] | None
    log: str
    startup_s: float
    info: dict[str, Any] = field(default_factory=dict)  # the Engine's server info
    probe: list[list[dict[str, Any]]] | None = None  # with device_probe.PROBE_DIR_ENV set


def start_engine(
    target: Path,
    *,
    draft: Path | None,
    algorithm: str,
    plugin: bool,
    work_dir: Path,
    extra_env: dict[str, str] | None = None,
    **overrides: Any,
) -> Launch:
    """Launch, collect the scheduler report, server info, breakdown, log and device probe
    records, shut down."""
    specinit_dir = work_dir / "specinit"
    specinit_dir.mkdir(parents=True)
    with cpu_engine(
        target,
        draft_model_path=draft,
        algorithm=algorithm,
        plugin=plugin,
        work_dir=work_dir,
        extra_env={REPORT_DIR_ENV: str(specinit_dir), **(extra_env or {})},
        **overrides,
    ) as engine:
        report = engine.scheduler_report()
        info = engine.server_info()
    probe_dir = (extra_env or {}).get(device_probe.PROBE_DIR_ENV)
    return Launch(
        plugin=plugin,
        report=report,
        breakdown=read_breakdown(specinit_dir),
        log=engine.log_path.read_text(errors="replace"),
        startup_s=engine.startup_s,
        info=info,
        probe=device_probe.scheduler_records(Path(probe_dir)) if probe_dir else None,
    )


def launch_cache(
    tmp_path_factory: pytest.TempPathFactory, starters: Mapping[str, Callable[[Path], T]]
) -> Callable[[str], T]:
    """``get(name)``: the cached launch ``starters[name](work_dir)``; a failure is cached too,
    so a broken launch is reported once per test instead of being retried by each."""
    cache: dict[str, T | BaseException] = {}

    def get(name: str) -> T:
        if name not in cache:
            try:
                cache[name] = starters[name](tmp_path_factory.mktemp(name))
            except Exception as exc:
                cache[name] = exc
        result = cache[name]
        if isinstance(result, BaseException):
            raise result
        return result

    return get


def assert_phased(run: Launch, algorithm: str) -> dict[str, Any]:
    """The launch went through the four phases, in order, with the plugin loaded."""
    report, breakdown = run.report, run.breakdown
    assert report["specinit_loaded"], report["sglang_plugins_env"]
    assert report["scheduler"]["spec_algorithm"] == algorithm
    assert breakdown is not None, "no memory-rank*.json: the init was not phased"
    assert list(breakdown["phase_seconds"]) == list(PHASES)
    assert all(s >= 0 for s in breakdown["phase_seconds"].values())
    assert STOCK_WARNING not in run.log
    marks = [run.log.find(f"[specinit] phase {phase}") for phase in PHASES]
    assert -1 not in marks and marks == sorted(marks), marks
    # Every draft weight load precedes the target's pool profiling, which precedes the pools.
    draft_loads = reading_seqs(report, "ModelRunner.load_model", True)
    (profile,) = reading_seqs(report, "ModelRunnerKVCacheMixin._profile_available_bytes", False)
    pools = reading_seqs(report, "ModelRunnerKVCacheMixin.init_memory_pool", False)
    assert draft_loads and max(draft_loads) < profile < min(pools)
    return breakdown


def predicted_plan(
    run: Launch,
    algorithm: str,
    *,
    draft_kv_pools: tuple[budget.KVSpec, ...],
    target_kv: budget.KVSpec = DEFAULT_TARGET_KV,
    context_len: int = DEFAULT_TARGET.max_position_embeddings,
    **draft: int,
) -> budget.PoolPlan:
    """``budget.plan_pools`` from the given geometry (target: the default tiny Llama), the
    fraction and what the harness saw, nothing from the plugin: the meter's free and resident
    bytes (``meter_budget``), the target's live weights, and as the draft's what the meter held
    beyond those. ``draft``: more (or other) ``budget.DraftSpec`` fields."""
    report = run.report
    meter = meter_budget(report)
    target_weight_bytes = runner(report, "target")["weight_bytes"]
    inputs = budget.BudgetInputs(
        pre_load_free_bytes=meter.pre_load_free_bytes,
        mem_fraction_static=F,
        target_kv=target_kv,
        target_weight_bytes=target_weight_bytes,
        page_size=1,
        context_len=context_len,
        draft=budget.DraftSpec(
            algorithm=algorithm,
            kv_pools=draft_kv_pools,
            **{"weight_bytes": meter.resident_bytes - target_weight_bytes, **draft},
        ),
        max_running_requests=report["server_args"]["max_running_requests"],
        measured_resident_bytes=meter.resident_bytes,
    )
    return budget.plan_pools(inputs)


def assert_pools_as_planned(run: Launch, plan: budget.PoolPlan, shape: TinyLlamaShape) -> None:
    """The default tiny Llama target and a draft of ``shape``, one MHA pool each: both pools
    hold the planned tokens, at (and priced at) their own geometry."""
    report, breakdown = run.report, run.breakdown
    assert breakdown is not None
    tpool, dpool = runner(report, "target")["kv_pool"], runner(report, "draft")["kv_pool"]
    assert plan.tokens > 0
    assert tpool["size"] == dpool["size"] == plan.tokens == breakdown["tokens"]
    assert report["scheduler"]["max_total_num_tokens"] == run.info["max_total_num_tokens"]
    assert report["scheduler"]["max_total_num_tokens"] == plan.tokens
    assert (dpool["layer_num"], dpool["head_num"], dpool["head_dim"]) == (
        shape.layers,
        shape.kv_heads,
        shape.head_dim,
    )
    target_cell, draft_cell = DEFAULT_TARGET.kv_bytes_per_token(), shape.kv_bytes_per_token()
    assert breakdown["target_kv_bytes_per_token"] == target_cell
    assert breakdown["draft_kv_bytes_per_token"] == draft_cell
    assert breakdown["priced_kv_bytes_per_token"] == target_cell + draft_cell
    assert kv_buffer_bytes(tpool) == (plan.tokens + 1) * target_cell
    assert kv_buffer_bytes(dpool) == (plan.tokens + 1) * draft_cell
    assert breakdown["allocated_target_kv_pool_bytes"] == kv_buffer_bytes(tpool)
    assert breakdown["allocated_draft_kv_pool_bytes"] == kv_buffer_bytes(dpool)


def _class_body(module: str, class_name: str) -> list[ast.stmt]:
    """A class body from the installed source (no import)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    return cls.body


def init_call_order(module: str, class_name: str) -> list[str]:
    """Names of the attributes of ``self`` a class's ``__init__`` uses, in source order."""
    body = _class_body(module, class_name)
    (init,) = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    events: list[tuple[int, int, str]] = []
    for node in ast.walk(init):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            value = node.func.value
            if isinstance(value, ast.Name) and value.id == "self":
                events.append((node.lineno, node.col_offset, node.func.attr))
            elif isinstance(value, ast.Call) and getattr(value.func, "id", None) == "super":
                events.append((node.lineno, node.col_offset, "super"))
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Attribute) and getattr(t.value, "id", None) == "self":
                    events.append((node.lineno, node.col_offset, t.attr + "="))
    return [name for *_, name in sorted(events)]


def class_defines(module: str, class_name: str) -> set[str]:
    """Method names a class body defines."""
    return {n.name for n in _class_body(module, class_name) if isinstance(n, ast.FunctionDef)}
