"""Pipeline parallelism priced per stage: PP 2 on device cpu, plugin off and on (sglang 0.5.23)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.launch.engine import cpu_engine
from harness.reports.report_reading import (
    REPORT_DIR_ENV,
    F,
    checkpoint_bytes,
    kv_buffer_bytes,
    pool_bytes,
    read_rank_breakdowns,
    runner,
    runners,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

PP = 2


@dataclass
class PPLaunch:
    """One PP 2 launch: per stage (pp rank) the scheduler report, the plugin's breakdown."""

    reports: dict[int, dict[str, Any]]
    breakdowns: dict[int, dict[str, Any]]
    log: str


def _pp2(work: Path, plugin: bool) -> PPLaunch:
    breakdown_dir = work / "specinit"
    breakdown_dir.mkdir(parents=True)
    with cpu_engine(
        llama_family.tiny_llama_target(),
        draft_model_path=eagle_drafts.tiny_eagle_draft(),
        algorithm="EAGLE",
        plugin=plugin,
        work_dir=work,
        startup_timeout_s=900,
        extra_env={
            "SGLANG_ENABLE_PP_SPEC": "1",
            "SGLANG_CPU_OMP_THREADS_BIND": "0|1",
            REPORT_DIR_ENV: str(breakdown_dir),
        },
        pp_size=PP,
        disable_overlap_schedule=True,
    ) as engine:
        reports = [r for r in engine.scheduler_reports() if "error" not in r]
        log = engine.log_path.read_text(errors="replace")
        startup_s = engine.startup_s
    print(f"\n[0.5.23 PP 2, plugin {'on' if plugin else 'off'}] up in {startup_s:.1f} s")
    for line in log.splitlines():
        if "[specinit]" in line and ("PP stage" in line or "stock sglang" in line):
            print(line[line.index("[specinit]") :])
    return PPLaunch(
        reports={int(r["ranks"]["pp"]): r for r in reports},
        breakdowns={int(b["pp_rank"]): b for b in read_rank_breakdowns(breakdown_dir)},
        log=log,
    )


@pytest.fixture(scope="module")
def pp2(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, PPLaunch]:
    root = tmp_path_factory.mktemp("pp2")
    return {plugin: _pp2(root / str(plugin), plugin) for plugin in (True, False)}


# 0.5.23's meter callers (harness.cpu_doubles.shims records who asked, and each rank's own
# reading before SGLang's MIN all-reduce).
PRE_LOAD = "bootstrap.measure_pre_model_load_memory"
PROFILE = "KVCacheConfigurator._profile_available_bytes"


def _stage_pools(report: dict[str, Any]) -> tuple[int, int]:
    """(target, draft) K/V buffer bytes this stage's scheduler really allocated."""
    drafts = runners(report, "draft")
    return pool_bytes(report, "target"), sum(kv_buffer_bytes(d["kv_pool"]) for d in drafts)


def _tokens(report: dict[str, Any]) -> int:
    return int(runner(report, "target")["max_total_num_tokens"])


def _stage_use(launch: PPLaunch, stage: int) -> tuple[int, int]:
    """(``f x`` this stage's own free memory before loading, its weights as SGLang measured them
    + the pools it built): the target's pre-load reading is the 2nd of its three in
    ``measure_pre_model_load_memory``, the weights what it held when its pool was profiled."""
    report = launch.reports[stage]
    pre, profile = (
        [int(r["free_bytes"]) for r in report["meter"]["readings"] if r["caller"].endswith(caller)]
        for caller in (PRE_LOAD, PROFILE)
    )
    return int(F * pre[1]), pre[1] - profile[0] + sum(_stage_pools(report))


def test_both_stages_run_fit_their_budgets_and_serve_one_count_at_least_stocks(pp2) -> None:
    for plugin, launch in pp2.items():
        assert sorted(launch.reports) == list(range(PP))
        assert _stage_pools(launch.reports[0])[1] == 0  # no draft pool on the first stage
        assert _stage_pools(launch.reports[PP - 1])[1] > 0
        # Every stage fits its own budget.
        for stage, report in launch.reports.items():
            budget, used = _stage_use(launch, stage)
            target, draft = _stage_pools(report)
            print(
                f"\n{'plugin' if plugin else 'stock'} PP{stage}: tokens {_tokens(report):,}, "
                f"budget {budget:,} B, used {used:,} B ({100 * used / budget:.4f} %), "
                f"pools {target:,} + {draft:,} B"
            )
            if plugin:
                assert used <= budget, (stage, used, budget)
            else:
                padding = sum(_stage_pools(report)) // (_tokens(report) + 1)
                assert used <= budget + padding, (stage, used, budget)
    # The tightest stage fills its budget to a page.
    budget, used = _stage_use(pp2[True], PP - 1)
    target, draft = _stage_pools(pp2[True].reports[PP - 1])
    per_row = (target + draft) // (_tokens(pp2[True].reports[PP - 1]) + 1)
    assert 0 <= budget - used < per_row
    # The stages serve one count, at least stock's.
    on = {stage: _tokens(r) for stage, r in pp2[True].reports.items()}
    off = {stage: _tokens(r) for stage, r in pp2[False].reports.items()}
    print(f"\ntokens per stage stock -> plugin: {off} -> {on}")
    assert len(set(on.values())) == 1 == len(set(off.values()))  # SGLang's minimum
    assert on[0] >= off[0]
    for stage, breakdown in pp2[True].breakdowns.items():
        assert breakdown["tokens"] == on[stage]


def test_first_stage_is_priced_without_a_draft_reserve_the_last_binds_lm_head(pp2) -> None:
    first, last = pp2[True].breakdowns[0], pp2[True].breakdowns[PP - 1]
    shown = ("pp_stage_tokens", "tokens", "priced_kv_bytes_per_token", "resident_bytes")
    shown += ("target_kv_pool_bytes", "draft_kv_pool_bytes", "headroom_bytes")
    for b in (first, last):
        print(f"\nPP{b['pp_rank']} breakdown: " + ", ".join(f"{k} {b[k]:,}" for k in shown))
    assert first["pp_stage_holds_draft"] is False and first["pp_stage_priced"] == "target pool"
    assert first["draft_kv_bytes_per_token"] == 0 == first["draft_kv_pool_bytes"]
    assert first["priced_kv_bytes_per_token"] == first["target_kv_bytes_per_token"]
    # What the first stage's own pool really costs per row (its allocation over its tokens,
    # padding page included) is what it was priced at, to the padding row.
    target, _ = _stage_pools(pp2[True].reports[0])
    tokens = _tokens(pp2[True].reports[0])
    assert first["target_kv_bytes_per_token"] * tokens <= target
    assert target <= first["target_kv_bytes_per_token"] * (tokens + first["page_size"])
    # The last stage is charged its draft, at what that pool allocates per row.
    assert last["pp_stage_holds_draft"] is True
    _, draft = _stage_pools(pp2[True].reports[PP - 1])
    assert last["draft_kv_bytes_per_token"] > 0
    assert last["allocated_draft_kv_pool_bytes"] == draft == last["draft_kv_pool_bytes"]
    # Each stage affords its own count; SGLang serves the smaller, the last stage's here.
    assert first["pp_stage_tokens"] > last["pp_stage_tokens"] == last["tokens"]
    assert last["pp_tightest_stage"] and not first["pp_tightest_stage"]
    # The last stage binds the lm_head before profiling; the first holds no draft.
    target_dir = llama_family.tiny_llama_target()
    lm_head = checkpoint_bytes(target_dir, lambda name: name == "lm_head.weight")
    assert last["stock_duplicate_bytes_at_profile"] == lm_head
    assert first["stock_duplicate_bytes_at_profile"] == 0
    # Each stage logs what it priced; neither stepped aside.
    log = pp2[True].log
    assert "PP stage 0 of 2 priced as its target pool" in log
    assert "PP stage 1 of 2 priced as its target + draft pools" in log
    assert "stock sglang" not in log
