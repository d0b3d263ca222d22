"""The tiny TP 2 pair every generation suite launches, and each rank's own meter arithmetic."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.checkpoints import eagle_drafts, llama_family
from harness.checkpoints.eagle_drafts import TP2_EAGLE3_DRAFT
from harness.checkpoints.llama_family import DEFAULT_TARGET
from harness.cpu_doubles.shims import PER_DEVICE_CAPACITY_ENV
from harness.launch.release_suite import eagle3_plan_argv
from harness.matrices.plan_verdicts import ALGORITHM, SPEC_FLAGS  # the fault matrices' pair
from harness.reports.report_reading import (
    REPORT_DIR_ENV,
    F,
    MeterBudget,
    budget_from_free,
    kv_buffer_bytes,
    kv_spec,
    pre_load_reading,
    profile_reading,
    read_rank_breakdowns,
    runner,
)

MULTI_RANK_TIMEOUT_S = 900
STARTUP_BOUND_S = 600.0
TP = 2
CAPACITY = 256 << 20
# 24 MiB less on rank 1: 232 / 256 = 0.906, inside SGLang's own 10 % TP imbalance check.
TIGHT_CAPACITY = CAPACITY - (24 << 20)
# What one rank holds of each model's KV: half the KV heads.
TARGET_ON_RANK = replace(DEFAULT_TARGET, kv_heads=DEFAULT_TARGET.kv_heads // TP)
DRAFT_ON_RANK = replace(TP2_EAGLE3_DRAFT, kv_heads=TP2_EAGLE3_DRAFT.kv_heads // TP)
PER_TOKEN_ON_RANK = TARGET_ON_RANK.kv_bytes_per_token() + DRAFT_ON_RANK.kv_bytes_per_token()


@dataclass
class RankedLaunch:
    """What one multi-rank launch left behind: per-rank scheduler reports, breakdowns, log."""

    plugin: bool
    reports: dict[int, dict[str, Any]]  # by TP rank
    breakdowns: list[dict[str, Any]]
    breakdown_files: list[str]
    served_tokens: int
    log: str
    startup_s: float

    def breakdown(self, tp_rank: int) -> dict[str, Any]:
        (found,) = [b for b in self.breakdowns if b["tp_rank"] == tp_rank]
        return found


def start_tp2(
    work_dir: Path,
    capacities: tuple[int, int] = (CAPACITY, CAPACITY),
    *,
    launcher: str = "server",
    plugin: bool = True,
    **server_args: Any,
) -> RankedLaunch:
    """A TP 2 launch (server or Engine), one simulated device of ``capacities[i]`` per rank."""
    from harness.launch.engine import cpu_engine, cpu_server

    specinit_dir = work_dir / "specinit"
    specinit_dir.mkdir(parents=True)
    start = {"server": cpu_server, "engine": cpu_engine}[launcher]
    with start(
        llama_family.tiny_llama_target(),
        draft_model_path=eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
        algorithm=ALGORITHM,
        plugin=plugin,
        capacity_bytes=capacities[0],
        work_dir=work_dir,
        startup_timeout_s=STARTUP_BOUND_S,
        extra_env={
            REPORT_DIR_ENV: str(specinit_dir),
            PER_DEVICE_CAPACITY_ENV: ",".join(map(str, capacities)),
        },
        tp_size=TP,
        **SPEC_FLAGS,
        **server_args,
    ) as handle:
        ok = [r for r in handle.scheduler_reports() if "error" not in r]
        reports = {r["ranks"]["tp"]: r for r in ok}
        assert sorted(reports) == list(range(TP)), [r["ranks"] for r in ok]
        run = RankedLaunch(
            plugin=plugin,
            reports=reports,
            breakdowns=read_rank_breakdowns(specinit_dir),
            breakdown_files=sorted(p.name for p in specinit_dir.glob("memory-rank*.json")),
            served_tokens=handle.server_info()["max_total_num_tokens"],
            log=handle.log_path.read_text(errors="replace"),
            startup_s=handle.startup_s,
        )
    print(f"\n[TP 2 {launcher}, plugin {'on' if plugin else 'off'}] up in {run.startup_s:.1f} s")
    return run


def _own_free(report: dict[str, Any], caller: str, index: int, before_0523: Any) -> int:
    """Reading ``index`` of the 0.5.23 generation's ``caller``, else ``before_0523``'s."""
    found = [r for r in report["meter"]["readings"] if r["caller"].endswith(caller)]
    return (found[index] if found else before_0523(report))["free_bytes"]


def own_pre_load_free(report: dict[str, Any]) -> int:
    """This rank's own free memory before the target loads, before SGLang's MIN all-reduce (on
    0.5.23, the 2nd of measure_pre_model_load_memory's three readings)."""
    return _own_free(report, "bootstrap.measure_pre_model_load_memory", 1, pre_load_reading)


def own_free_at_profile(report: dict[str, Any]) -> int:
    """This rank's own free memory where SGLang profiles the target pool."""
    return _own_free(report, "KVCacheConfigurator._profile_available_bytes", 0, profile_reading)


def own_budget(report: dict[str, Any]) -> MeterBudget:
    """The budget one rank alone would have: SGLang's arithmetic on its own readings."""
    return budget_from_free(own_pre_load_free(report), own_free_at_profile(report))


def rank_plan(
    report: dict[str, Any], draft_weight_bytes: int | None = None, *, with_requests: bool = False
) -> Any:
    """``budget.plan_pools`` from one rank's OWN readings and the per-rank geometry."""
    from sglang_specinit import budget

    own = own_budget(report)
    weights = {} if draft_weight_bytes is None else {"weight_bytes": draft_weight_bytes}
    draft = budget.DraftSpec(algorithm=ALGORITHM, kv_pools=(kv_spec(DRAFT_ON_RANK),), **weights)
    requests = {"max_running_requests": report["server_args"]["max_running_requests"]}
    inputs = budget.BudgetInputs(
        pre_load_free_bytes=own.pre_load_free_bytes,
        mem_fraction_static=F,
        target_kv=kv_spec(TARGET_ON_RANK),
        target_weight_bytes=runner(report, "target")["weight_bytes"],
        page_size=1,
        context_len=DEFAULT_TARGET.max_position_embeddings,
        draft=draft,
        measured_resident_bytes=own.resident_bytes,
        **(requests if with_requests else {}),
    )
    return budget.plan_pools(inputs)


def pools_and_resident(report: dict[str, Any]) -> int:
    """What one rank's budget covers: resident bytes at profiling + both KV buffers."""
    return (
        own_budget(report).resident_bytes
        + kv_buffer_bytes(runner(report, "target")["kv_pool"])
        + kv_buffer_bytes(runner(report, "draft")["kv_pool"])
    )


def assert_half_of_every_kv_head_set(run: RankedLaunch) -> None:
    """Every rank holds half of each model's KV heads (both split over TP 2)."""
    for tp_rank, report in run.reports.items():
        assert report["ranks"]["gpu_id"] == tp_rank
        assert report["specinit_loaded"]
        for role, shape in (("target", TARGET_ON_RANK), ("draft", DRAFT_ON_RANK)):
            pool = runner(report, role)["kv_pool"]
            geometry = (pool["layer_num"], pool["head_num"], pool["head_dim"])
            assert geometry == (shape.layers, shape.kv_heads, shape.head_dim), (tp_rank, role)
    assert "Expected a cuda device" not in run.log


def planner_argv(tight: dict[str, Any], *layout: str, device_memory: int) -> list[str]:
    return eagle3_plan_argv(
        llama_family.tiny_llama_target(),
        eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
        tight,
        *layout,
        device_memory=device_memory,
    )


def assert_plan_equals_ranks(planned: dict[str, Any], run: RankedLaunch) -> None:
    """The plan's pools and weights are what every rank allocated and holds."""
    for report in run.reports.values():
        target, draft = runner(report, "target"), runner(report, "draft")
        assert planned["tokens"] == target["kv_pool"]["size"] == draft["kv_pool"]["size"]
        assert planned["target_kv_pool_bytes"] == kv_buffer_bytes(target["kv_pool"])
        assert planned["draft_kv_pool_bytes"] == kv_buffer_bytes(draft["kv_pool"])
        # Weights per rank: every parameter it holds but the draft's (shared) embedding, plus
        # the target's buffers no checkpoint stores (rotary cos/sin, whole on each rank).
        buffers = planned["target_buffers"]["bytes"]
        assert buffers == sum(target["buffer_bytes"].values()) > 0
        assert planned["target_weight_bytes"] == sum(target["parameter_bytes"].values()) + buffers
        own = {k: v for k, v in draft["parameter_bytes"].items() if "embed_tokens" not in k}
        assert planned["draft_weight_bytes"] == sum(own.values())
    for key in ("tokens", "target_kv_bytes_per_token", "draft_kv_bytes_per_token", "budget_bytes"):
        assert {b[key] for b in run.breakdowns} == {planned[key]}, key
