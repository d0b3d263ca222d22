"""Shared helpers of the per-worker CPU tests (``test_workers_<name>.py``); no tests here.

Every worker test launches a real ``sglang.Engine`` on device cpu through the harness and proves
its claims from the scheduler process: the harness report (live pools, meter readings with the
function that took each one) and the plugin's ``memory-rank0.json``. The expected token counts
are recomputed here with ``budget.plan_pools`` from the tiny checkpoints' geometry, the
fraction and the meter, never read back from the plugin.
"""

from __future__ import annotations

import ast
import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.engine import DEFAULT_CAPACITY_BYTES, cpu_engine
from safetensors import safe_open

GIB = 1 << 30
F = 0.5  # cpu_engine_kwargs' default --mem-fraction-static
CAPACITY = DEFAULT_CAPACITY_BYTES
REPORT_DIR_ENV = "SGLANG_SPECINIT_REPORT_DIR"
PHASES = (
    "1/4 load target weights",
    "2/4 load draft weights",
    "3/4 allocate KV pools",
    "4/4 attention backends and graphs",
)
STOCK_WARNING = "[specinit] stock speculative init (draft memory NOT budgeted)"
# A stock launch overshoots f x capacity by at least this much with the tiny models used here.
MIN_STOCK_OVERSHOOT = 1.01


@dataclass
class Launch:
    """Everything one Engine launch left behind, collected before it was shut down."""

    plugin: bool
    report: dict[str, Any]
    breakdown: dict[str, Any] | None
    log: str
    startup_s: float


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
    """Launch, collect the scheduler report, breakdown and log, shut down."""
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
    path = specinit_dir / "memory-rank0.json"
    return Launch(
        plugin=plugin,
        report=report,
        breakdown=json.loads(path.read_text()) if path.is_file() else None,
        log=engine.log_path.read_text(errors="replace"),
        startup_s=engine.startup_s,
    )


def launch_cache(
    tmp_path_factory: pytest.TempPathFactory, starters: dict[str, Callable[[Path], Launch]]
) -> Callable[[str], Launch]:
    """``get(name)``: the cached launch ``starters[name](work_dir)``; a failure is cached too,
    so a broken launch is reported once per test instead of being retried by each."""
    cache: dict[str, Launch | BaseException] = {}

    def get(name: str) -> Launch:
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


# --------------------------------------------------------------------------- report helpers


def runners(report: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """The report's ModelRunners of one role, drafts ordered by ``draft_model_idx``."""
    return [r for r in report["model_runners"] if r["role"] == role]


def runner(report: dict[str, Any], role: str) -> dict[str, Any]:
    (found,) = runners(report, role)
    return found


def readings(report: dict[str, Any]) -> list[dict[str, Any]]:
    return report["meter"]["readings"]


def reading_seqs(report: dict[str, Any], func: str, is_draft: bool | None) -> list[int]:
    return [
        r["seq"]
        for r in readings(report)
        if r["caller"].endswith("." + func) and r["is_draft_worker"] is is_draft
    ]


def pre_load_reading(report: dict[str, Any]) -> dict[str, Any]:
    """The target's ``pre_model_load_memory`` reading: the 2nd of its 3 readings in
    ``init_torch_distributed`` (before_avail_memory, pre_model_load_memory, a local check)."""
    seqs = reading_seqs(report, "ModelRunner.init_torch_distributed", False)
    assert len(seqs) == 3, readings(report)
    return readings(report)[seqs[1]]


def profile_reading(report: dict[str, Any]) -> dict[str, Any]:
    """The reading SGLang sizes the target pool from (``_profile_available_bytes``)."""
    (seq,) = reading_seqs(report, "ModelRunnerKVCacheMixin._profile_available_bytes", False)
    return readings(report)[seq]


@dataclass(frozen=True)
class MeterBudget:
    """The budget as SGLang's own float arithmetic derives it from two meter readings."""

    pre_load_free_bytes: int
    budget_bytes: int
    available_bytes: int

    @property
    def resident_bytes(self) -> int:
        return self.budget_bytes - self.available_bytes


def meter_budget(report: dict[str, Any], f: float = F) -> MeterBudget:
    pre_gib = pre_load_reading(report)["free_bytes"] / GIB
    post_gib = profile_reading(report)["free_bytes"] / GIB
    pre_free = int(pre_gib * GIB)
    # ModelRunnerKVCacheMixin._profile_available_bytes, verbatim.
    available = int((post_gib - pre_gib * (1 - f)) * GIB)
    return MeterBudget(pre_free, int(f * pre_free), available)


def kv_buffer_bytes(pool: dict[str, Any]) -> int:
    """Bytes of a live MHA pool's K and V buffers (all layers, padding page included)."""
    return pool["k_bytes"] + pool["v_bytes"]


def checkpoint_bytes(path: Path, keep: Callable[[str], bool] = lambda name: True) -> int:
    """Bytes of the tensors in ``path``/model.safetensors whose name ``keep`` accepts."""
    total = 0
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        for name in f.keys():
            if keep(name):
                t = f.get_tensor(name)
                total += t.numel() * t.element_size()
    return total


def assert_phased(run: Launch, algorithm: str) -> dict[str, Any]:
    """The launch went through the four phases, in order, with the plugin loaded."""
    report, breakdown = run.report, run.breakdown
    assert report["specinit_loaded"], report["sglang_plugins_env"]
    assert report["scheduler"]["spec_algorithm"] == algorithm
    assert breakdown is not None, "no memory-rank0.json: the init was not phased"
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


def assert_stock(run: Launch, algorithm: str) -> None:
    """A plugin-off launch: stock SGLang, no phases, no breakdown."""
    assert not run.report["specinit_loaded"]
    assert run.report["scheduler"]["spec_algorithm"] == algorithm
    assert run.breakdown is None


# --------------------------------------------------------------------------- SGLang source


def init_call_order(module: str, class_name: str) -> list[str]:
    """Names of the attributes of ``self`` a class's ``__init__`` uses, in source order.

    Read from the installed SGLang source (no import): a call ``self.x(...)`` gives ``x``, an
    assignment ``self.x = ...`` gives ``x=``, ``super().__init__(...)`` gives ``super``.
    """
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    (init,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
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
    """Method names a class body defines, from the installed source (no import)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
