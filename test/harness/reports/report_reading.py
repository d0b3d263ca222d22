"""Reading the harness scheduler report and the plugin's memory breakdown."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_specinit import rank_reports

from harness.geometry import kv_specs
from harness.geometry.specs import attention_kv_spec

if TYPE_CHECKING:
    from harness.checkpoints.llama_layout import TinyLlamaShape

GIB = 1 << 30
F = 0.5  # cpu_engine_kwargs' default --mem-fraction-static

# ``caller`` of the meter readings that matter, as the harness shims record them.
INIT_TORCH_DISTRIBUTED = "ModelRunner.init_torch_distributed"
PROFILE_AVAILABLE_BYTES = "ModelRunnerKVCacheMixin._profile_available_bytes"


def runners(report: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [r for r in report["model_runners"] if r["role"] == role]


def runner(report: dict[str, Any], role: str) -> dict[str, Any]:
    """The one ModelRunner of ``role``; fails if not exactly one."""
    (found,) = runners(report, role)
    return found


def kv_buffer_bytes(pool: dict[str, Any]) -> int:
    return pool["k_bytes"] + pool["v_bytes"]


def pool_bytes(report: dict[str, Any], role: str) -> int:
    return kv_buffer_bytes(runner(report, role)["kv_pool"])


def readings(report: dict[str, Any]) -> list[dict[str, Any]]:
    return report["meter"]["readings"]


def reading_seqs(report: dict[str, Any], func: str, is_draft: bool | None) -> list[int]:
    """``seq`` of the readings ``func`` took on a runner of ``is_draft`` (None: no runner)."""
    return [
        r["seq"]
        for r in readings(report)
        if r["caller"].endswith("." + func) and r["is_draft_worker"] is is_draft
    ]


def torch_distributed_readings(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The target's 3 readings in ``init_torch_distributed``, in order (model_runner.py:
    ``before_avail_memory``, ``pre_model_load_memory``, then a local check)."""
    seqs = reading_seqs(report, INIT_TORCH_DISTRIBUTED, False)
    assert len(seqs) == 3, readings(report)
    return [readings(report)[s] for s in seqs]


def pre_load_reading(report: dict[str, Any]) -> dict[str, Any]:
    """The target's ``pre_model_load_memory`` reading: the free memory SGLang's fraction takes."""
    return torch_distributed_readings(report)[1]


def profile_reading(report: dict[str, Any]) -> dict[str, Any]:
    """The reading SGLang sizes the target pool from (``_profile_available_bytes``)."""
    (seq,) = reading_seqs(report, PROFILE_AVAILABLE_BYTES, False)
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
    """:class:`MeterBudget` from the pre-load and profiling readings, at fraction ``f``."""
    pre, post = pre_load_reading(report)["free_bytes"], profile_reading(report)["free_bytes"]
    return budget_from_free(pre, post, f)


def budget_from_free(pre_load_free: int, free_at_profile: int, f: float = F) -> MeterBudget:
    """:class:`MeterBudget` from two free-memory readings (bytes), at fraction ``f``."""
    pre_gib, post_gib = pre_load_free / GIB, free_at_profile / GIB
    pre_free = int(pre_gib * GIB)
    # ModelRunnerKVCacheMixin._profile_available_bytes, verbatim.
    available = int((post_gib - pre_gib * (1 - f)) * GIB)
    return MeterBudget(pre_free, int(f * pre_free), available)


# Where the plugin writes memory-rank<i>-pp<p>-tp<t>-dp<d>.json (``rank_reports``) when set.
REPORT_DIR_ENV = "SGLANG_SPECINIT_REPORT_DIR"
# The breakdown's ``phase_seconds`` keys and the ``[specinit] phase`` log lines, in order.
PHASES = (
    "1/4 load target weights",
    "2/4 load draft weights",
    "3/4 allocate KV pools",
    "4/4 attention backends and graphs",
)


def read_rank_breakdowns(directory: str | Path) -> list[dict[str, Any]]:
    """Every rank's breakdown in the plugin's report dir, by rank index."""
    found = [
        json.loads(p.read_text())
        for p in Path(directory).glob(f"{rank_reports.FILE_PREFIX}*.json")
    ]
    return sorted(found, key=lambda b: b.get("rank_index", 0))


def read_breakdown(directory: Path) -> dict[str, Any] | None:
    """The one rank's breakdown in the plugin's report dir (None if absent; fails on two)."""
    found = read_rank_breakdowns(directory)
    assert len(found) <= 1, f"{len(found)} rank breakdowns in {directory}, expected one"
    return found[0] if found else None


def kv_spec(shape: TinyLlamaShape) -> kv_specs.AttentionKVSpec:
    """The budget model's KV spec of a tiny Llama-like shape (K and V of the same head dim)."""
    return attention_kv_spec(
        num_layers=shape.layers,
        kv_dtype=shape.dtype,
        num_kv_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        v_head_dim=shape.head_dim,
    )


def checkpoint_bytes(path: Path, keep: Callable[[str], bool] = lambda name: True) -> int:
    """Bytes of the tensors in ``path``/model.safetensors whose name ``keep`` accepts."""
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), "pt") as f:
        tensors = [f.get_tensor(name) for name in f.keys() if keep(name)]
    return sum(t.numel() * t.element_size() for t in tensors)
