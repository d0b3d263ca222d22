"""Shared helpers of the per-worker CPU tests (and ``test_phased_eagle.py``); no tests here."""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from harness.checkpoints import llama_family
from harness.checkpoints.llama_family import DEFAULT_TARGET
from harness.checkpoints.llama_layout import TinyLlamaShape
from harness.launch.engine import DEFAULT_CAPACITY_BYTES, cpu_engine
from harness.reports import device_probe
from harness.reports.fidelity_tensors import TENSOR_REPORT_ENV
from harness.reports.report_reading import (
    PHASES,
    REPORT_DIR_ENV,
    F,
    kv_spec,
    meter_budget,
    pool_bytes,
    read_breakdown,
    reading_seqs,
    runner,
    runners,
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

    report: dict[str, Any]
    breakdown: dict[str, Any] | None
    log: str
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
    """Launch, collect what ``Launch`` holds, shut down."""
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
        report=report,
        breakdown=read_breakdown(specinit_dir),
        log=engine.log_path.read_text(errors="replace"),
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


def start_draft(draft: Draft, plugin: bool, work_dir: Path) -> Launch:
    """One launch of ``draft``; ``draft.probed``: with the device probe and every model tensor."""
    probe_env = {}
    if draft.probed:
        (work_dir / "probe").mkdir()
        probe_env = {
            device_probe.PROBE_ENV: "1",
            device_probe.PROBE_DIR_ENV: str(work_dir / "probe"),
            TENSOR_REPORT_ENV: "1",
        }
    return start_engine(
        draft.target(),
        draft=draft.checkpoint(),
        plugin=plugin,
        work_dir=work_dir,
        extra_env=probe_env,
        **draft.flags,
    )


def plugin_launches(
    tmp_path_factory: pytest.TempPathFactory, cases: Mapping[str, Draft]
) -> Callable[..., Launch]:
    """``launch(name, plugin=True)``: the cached ``start_draft(cases[name], plugin, work_dir)``."""
    get = launch_cache(
        tmp_path_factory,
        {
            f"{n}-{p}": functools.partial(start_draft, c, p)
            for n, c in cases.items()
            for p in (True, False)
        },
    )
    return lambda name, plugin=True: get(f"{name}-{plugin}")


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
    """``budget.plan_pools`` from the geometry and what the harness saw (the meter, the live
    target weights; the draft's: the rest of the resident bytes), nothing from the plugin."""
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


@dataclass(frozen=True)
class Draft:
    """One draft's launch and what the tests expect of it."""

    algorithm: str  # as SGLang resolves it
    target: Callable[[], Path]
    architectures: tuple[str, str]  # the target's, each draft runner's
    server_args: dict[str, Any]  # set by SGLang's own argument hooks
    draft_runners: int
    pool_bytes: Callable[[Launch], tuple[int, list[int]]]
    plan: Callable[[Launch], budget.PoolPlan]
    per_token: Callable[[float], float]  # target + draft pool bytes per token, at the SWA ratio
    checkpoint: Callable[[], Path]  # where its weights are
    own_tensor: Callable[[str], bool] = lambda name: True  # its checkpoint tensors
    truncation_bytes: int = 0  # what int() of each pool's SWA split leaves unpriced, at most
    shape: TinyLlamaShape | None = None  # a draft of the tiny Llama target: its one MHA pool
    own_request_table: bool = False
    shared: tuple[str, ...] = ()  # its tensors bound to the target's (not charged to it)
    flags: dict[str, Any] = field(default_factory=dict)  # the launch's, the algorithm included
    draft_cell: int = 0  # with a shape: its KV bytes per token, from its geometry
    probed: bool = False  # device probe records and every model tensor (hot-token map, head)


def llama_draft(
    algorithm: str,
    shape: TinyLlamaShape,
    checkpoint: Callable[[], Path],
    architecture: str,
    server_args: dict[str, Any],
    flags: dict[str, Any],
    **more: Any,
) -> Draft:
    """A draft of the tiny Llama target with a KV geometry of its own."""
    return Draft(
        algorithm,
        llama_family.tiny_llama_target,
        ("LlamaForCausalLM", architecture),
        server_args,
        draft_runners=1,
        pool_bytes=lambda run: (
            pool_bytes(run.report, "target"),
            [pool_bytes(run.report, "draft")],
        ),
        plan=lambda run: predicted_plan(run, algorithm, draft_kv_pools=(kv_spec(shape),)),
        per_token=lambda ratio: DEFAULT_TARGET.kv_bytes_per_token() + shape.kv_bytes_per_token(),
        checkpoint=checkpoint,
        shape=shape,
        flags={"algorithm": algorithm, **flags},
        own_tensor=lambda name: not any(part in name for part in more.get("shared", ())),
        **more,
    )


def assert_draft_pools_as_planned(run: Launch, draft: Draft) -> dict[str, Any]:
    """The phased launch of ``draft``: runners and pools as the harness predicts them, filling
    f x capacity to within one token."""
    report, breakdown = run.report, assert_phased(run, draft.algorithm)
    ratio = report["server_args"]["swa_full_tokens_ratio"]
    assert {key: report["server_args"][key] for key in draft.server_args} == draft.server_args
    target, drafts = runner(report, "target"), runners(report, "draft")
    assert len(drafts) == draft.draft_runners
    assert target["architecture"] == draft.architectures[0]
    assert {d["architecture"] for d in drafts} == {draft.architectures[1]}
    # Own KV buffers on the target's allocator, attached in the pool phase; the target's
    # request table unless the draft has a window of its own.
    assert target["kv_pool"]["id"] not in {d["kv_pool"]["id"] for d in drafts}
    assert {d["token_to_kv_pool_allocator_id"] for d in drafts} == {
        target["token_to_kv_pool_allocator_id"]
    }
    tables = {d["req_to_token_pool_id"] for d in drafts}
    assert (tables == {target["req_to_token_pool_id"]}) is not draft.own_request_table
    # The resident bytes the plugin sized with are what the meter says SGLang measured.
    meter = meter_budget(report)
    assert breakdown["resident_bytes"] == meter.resident_bytes
    plan = draft.plan(run)
    assert plan.tokens > 0
    assert target["kv_pool"]["size"] == plan.tokens == run.info["max_total_num_tokens"]
    assert report["scheduler"]["max_total_num_tokens"] == breakdown["tokens"] == plan.tokens
    # What was allocated is what was planned, pool by pool.
    target_bytes, draft_bytes = draft.pool_bytes(run)
    assert target_bytes == plan.target_kv_pool_bytes == breakdown["allocated_target_kv_pool_bytes"]
    assert sum(draft_bytes) == breakdown["allocated_draft_kv_pool_bytes"]
    if draft.shape is not None:  # one MHA pool each, holding (and priced at) its own geometry
        shape, dpool = draft.shape, runner(report, "draft")["kv_pool"]
        assert dpool["size"] == plan.tokens
        geometry = (shape.layers, shape.kv_heads, shape.head_dim)
        assert (dpool["layer_num"], dpool["head_num"], dpool["head_dim"]) == geometry
        cells = (DEFAULT_TARGET.kv_bytes_per_token(), shape.kv_bytes_per_token())
        assert breakdown["target_kv_bytes_per_token"] == cells[0]
        assert breakdown["draft_kv_bytes_per_token"] == draft.draft_cell == cells[1]
        assert breakdown["priced_kv_bytes_per_token"] == sum(cells)
        assert (target_bytes, *draft_bytes) == tuple((plan.tokens + 1) * c for c in cells)
    else:
        config = target["memory_pool_config"]
        assert config["full_max_total_num_tokens"] == plan.tokens
        assert config["swa_max_total_num_tokens"] == int(plan.tokens * ratio)
    # Weights, pools and per-request buffers fill f x capacity; one more token would not fit.
    used = meter.resident_bytes + target_bytes + sum(draft_bytes) + breakdown["draft_request_bytes"]
    limit = F * CAPACITY
    assert used <= meter.budget_bytes <= limit
    assert used >= 0.995 * limit
    assert meter.budget_bytes - used < draft.per_token(ratio) + draft.truncation_bytes
    assert report["meter"]["used_bytes"] >= used
    if draft.shape is not None and not draft.shared:  # its live tensors fill the budget
        draft_runner = runner(report, "draft")
        live = target["weight_bytes"] + draft_runner["weight_bytes"]
        live += target["kv_pool"]["storage_bytes"] + draft_runner["kv_pool"]["storage_bytes"]
        assert 0.995 * limit <= live <= limit
        assert report["meter"]["used_bytes"] >= live
    return breakdown
