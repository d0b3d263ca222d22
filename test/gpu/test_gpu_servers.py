"""Real GPU servers: each case fits and fills its budget and serves what stock SGLang serves."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gpu_server import (
    LOG_STEM,
    GpuServer,
    breakdowns,
    gpu_server,
    probe_records,
    require,
)
from harness.gpu import (
    gpu_cases,
    gpu_release,
    gpu_summary,
    gpu_verdict,
    load,
    storage_identity,
)
from harness.launch.server_process import SGLangStartError
from harness.reports import device_probe

pytestmark = pytest.mark.gpu

CASES = gpu_cases.cases()
# A greedy answer of 96 tokens takes seconds; a request still open after this is stuck.
REQUEST_TIMEOUT_S = 120.0
# The check passes when the counted memory is within this of the budget (see device_probe).
TOLERANCE = device_probe.BOOKKEEPING_TOLERANCE_BYTES
# Peak share of the KV pool held by running requests that the load must reach. SGLang admits
# a request only with room for part of its future output, so the pool is never quite 100 %.
FILLED = 0.85
Wait = Callable[[int], Any]


def _server(
    case: gpu_cases.Case, work_dir: Path, *, plugin: bool, fraction: str | None = None
) -> AbstractContextManager[GpuServer]:
    """``gpu_server`` at ``fraction`` (default the case's f), deterministic unless turned off."""
    flag = gpu_release.DETERMINISTIC_FLAG if gpu_cases.deterministic() else None
    fraction = fraction or gpu_cases.mem_fraction()
    return gpu_server(case, work_dir, plugin=plugin, mem_fraction=fraction, deterministic_flag=flag)


def _generate(server: GpuServer, case: gpu_cases.Case, prompt: str) -> dict[str, Any]:
    logprobs = case.algorithm not in gpu_release.installed_settings().no_logprobs_for
    payload = gpu_cases.generate_payload(prompt, logprobs=logprobs)
    return server.post("/generate", payload, timeout_s=REQUEST_TIMEOUT_S)


@dataclass
class Served:
    """One launch that answered the prompts (stock: twice, ``control``)."""

    work_dir: Path
    server: GpuServer
    info: dict[str, Any]
    responses: list[dict[str, Any]]
    control: list[dict[str, Any]] | None
    short_load: load.LoadResult

    def launch(self, release: gpu_release.ReleaseSettings) -> gpu_verdict.Launch:
        return gpu_verdict.Launch(
            info=self.info,
            responses=self.responses,
            capture=gpu_verdict.GraphCapture.from_log(self.server.startup_log(), release),
            usages=[device_probe.usage_after_pools(r) for r in probe_records(self.work_dir)],
            breakdowns=breakdowns(self.server),
            control=self.control,
        )

    def serving(self) -> dict[str, Any]:
        return {
            "output_throughput_tok_s": round(self.short_load.output_throughput, 1),
            "accept_length": self.short_load.accept_length,
            "short_load": self.short_load.summary(),
            "device_memory": self.server.device_memory,
        }


def _serve(
    case: gpu_cases.Case,
    work_dir: Path,
    report: gpu_summary.CaseReport,
    *,
    plugin: bool,
    fraction: str,
    wait: Wait,
) -> Served:
    """Launch, answer the prompts (stock: twice), run the short load, tear down; recorded."""
    role = "plugin" if plugin else "stock"
    wait(case.tp)
    with report.launch(role, fraction) as entry:
        try:
            with _server(case, work_dir, plugin=plugin, fraction=fraction) as server:
                info = server.server_info()
                responses = [_generate(server, case, p) for p in gpu_cases.PROMPTS]
                control = None
                if not plugin:
                    control = [_generate(server, case, p) for p in gpu_cases.PROMPTS]
                short = load.short_load(server.base_url)
        except SGLangStartError as error:
            if gpu_verdict.oom_lines(str(error)):
                entry.outcome = "out of memory at start-up"
            raise
    return Served(work_dir, server, info, responses, control, short)


def _stock_and_comparison(
    case: gpu_cases.Case,
    tmp_path: Path,
    plugin_at_f: Served,
    report: gpu_summary.CaseReport,
    wait: Wait,
) -> tuple[Served, Served]:
    fraction = gpu_cases.mem_fraction()
    try:
        stock = _serve(case, tmp_path / "stock", report, plugin=False, fraction=fraction, wait=wait)
    except SGLangStartError as error:
        if not gpu_verdict.oom_lines(str(error)):
            raise
        report.result("stock_at_f", gpu_summary.STOCK_OOM_AT_F.format(f=fraction))
        lower = gpu_cases.stock_mem_fraction()
        at_lower = {"fraction": lower, "wait": wait}
        stock = _serve(case, tmp_path / "stock-lower-f", report, plugin=False, **at_lower)
        plugin = _serve(case, tmp_path / "plugin-lower-f", report, plugin=True, **at_lower)
        report.result("compared_at", f"f={lower}, both servers")
        return stock, plugin
    report.result("stock_at_f", "started")
    report.result("compared_at", f"f={fraction}, both servers")
    return stock, plugin_at_f


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_fits_its_budget_and_matches_stock(
    case: gpu_cases.Case, tmp_path: Path, wait_for_released_devices: Wait, record_property: Any
) -> None:
    require(case)
    release = gpu_release.installed_settings()
    report = gpu_summary.new_report(case.name, release.version, gpu_cases.deterministic(), tmp_path)
    record_property("case_report", str(report.path))
    wait, fraction = wait_for_released_devices, gpu_cases.mem_fraction()
    on = _serve(case, tmp_path / "plugin", report, plugin=True, fraction=fraction, wait=wait)
    stock, compared = _stock_and_comparison(case, tmp_path, on, report, wait)
    assert not breakdowns(stock.server), "the plugin was not off in the stock launch"
    info = compared.info

    # Launched as the case says (the two EAGLE3 cases differ only here).
    assert info["speculative_algorithm"] == case.algorithm
    assert info["enable_multi_layer_eagle"] == ("--enable-multi-layer-eagle" in case.args)
    assert info["disable_overlap_schedule"] == (not case.overlap), info["disable_overlap_schedule"]
    resized = gpu_cases.POST_CAPTURE_ENV[0] in case.env
    if compared is not on:  # the plugin at f is judged on its own memory too
        at_f = on.launch(release)
        assert gpu_verdict.breakdown_problems(at_f, case.tp, resized=resized) == []
        for b, usage in zip(at_f.breakdowns, at_f.usages, strict=True):
            assert gpu_verdict.memory_problems(b, usage, fill=case.tp == 1) == []

    stock_identity = storage_identity.read_snapshots(stock.work_dir / "probe") or [{}]
    stock_after_init = (stock_identity[0].get("after_init") or [None])[-1]
    evidence = gpu_verdict.CaseEvidence(
        prompts=gpu_cases.PROMPTS,
        tp=case.tp,
        expect_draft=gpu_verdict.expected_draft_graph(case.args),
        plugin=compared.launch(release),
        stock=stock.launch(release),
        identity=storage_identity.read_snapshots(compared.work_dir / "probe"),
        stock_after_init=stock_after_init,
        resized_after_capture=resized,
    )
    problems = gpu_verdict.case_problems(evidence)
    sides = {"plugin": (compared, evidence.plugin), "stock": (stock, evidence.stock)}
    tokens = {name: served.info["max_total_num_tokens"] for name, (served, _) in sides.items()}
    tokens["ratio"] = round(tokens["plugin"] / tokens["stock"], 4)
    report.result("tokens", {**tokens, "stock_fits": evidence.stock_fits})
    batch_lists = {name: launch.capture.batch_lists for name, (_, launch) in sides.items()}
    batch_lists["args_equal"] = not problems["batch_lists"]
    report.result("cuda_graph_batch_lists", batch_lists)
    report.result("serving", {name: served.serving() for name, (served, _) in sides.items()})
    for key in ("greedy_ties", "stock_control_differences"):
        report.result(key, evidence.notes[key])
    drafts = []
    for name, (served, _) in sides.items():
        n = gpu_verdict.summed(served.responses)
        drafts.append(f"{name} {n.correct_drafts}/{n.proposed_drafts} ({n.accept_rate:.1%})")
    report.result("drafts", ", ".join(drafts))
    report.result("verdict", {name: found for name, found in problems.items() if found})
    record_property("graphs", f"plugin {evidence.plugin.capture}; stock {evidence.stock.capture}")
    # Every check of the case's verdict (harness.gpu.gpu_verdict, failing broken plugins in CI).
    assert problems == {name: [] for name in gpu_verdict.CHECKS}
    stats = [gpu_verdict.DraftStats.from_meta_info(r["meta_info"]) for r in compared.responses]
    assert all(s.verify_steps > 0 for s in stats), stats
    assert gpu_verdict.oom_lines(compared.server.log_after_ready()) == []


def _eagle3(wait: Wait) -> gpu_cases.Case:
    case = gpu_cases.case("eagle3")
    require(case)
    wait(case.tp)
    return case


def _fill_plan(info: dict[str, Any]) -> load.LoadPlan:
    (state,) = info["internal_states"][:1]
    concurrency = state["effective_max_running_requests_per_dp"]
    return load.plan_fill(info["max_total_num_tokens"], info["max_req_input_len"], concurrency)


def test_full_kv_cache_is_served_without_running_out_of_memory(
    tmp_path: Path, wait_for_released_devices: Wait
) -> None:
    """At f = 0.9 the 1 - f share must still hold activations and graphs at full occupancy."""
    case = _eagle3(wait_for_released_devices)
    with _server(case, tmp_path, plugin=True) as server:
        result = load.run_load(server.base_url, _fill_plan(server.server_info()))
        healthy_after = server.healthy()
    assert result.failed == [] and result.short == [], result.summary()
    assert result.peak_usage >= FILLED, result.summary()
    assert healthy_after, result.summary()
    # Only what was logged while serving: start-up lines are not this test's business.
    assert gpu_verdict.oom_lines(server.log_after_ready()) == [], result.summary()


def test_stock_sglang_overshoots_the_same_budget(
    tmp_path: Path, wait_for_released_devices: Wait, record_property: Any
) -> None:
    """The regression the plugin exists for, on the same launch as the eagle3 case."""
    case = _eagle3(wait_for_released_devices)
    started = True
    try:
        with _server(case, tmp_path, plugin=False) as server:
            assert not breakdowns(server)  # the plugin really was off
            result = load.run_load(server.base_url, _fill_plan(server.server_info()))
            record_property("stock_load", f"{result.summary()}; healthy: {server.healthy()}")
    except SGLangStartError as error:
        started = False
        record_property("stock_start", str(error)[-2000:])
    log_path = tmp_path / f"{LOG_STEM}.log"
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    records = probe_records(tmp_path)
    assert len(records) == case.tp, log[-3000:]
    ooms = gpu_verdict.oom_lines(log)  # the whole log: stock may die of it during start-up
    for rank_records in records:
        pools = [r for r in rank_records if r["event"] == "exit"]
        if sum(r["method"] == device_probe.POOL_METHOD for r in pools) < 2:  # no draft pool yet
            assert not started and ooms, log[-3000:]
            continue
        usage = device_probe.usage_after_pools(rank_records)
        record_property("stock_memory", usage.describe())
        assert usage.draft_kv_bytes > 0, usage.describe()
        if gpu_release.installed_settings().stock_sizes_before_the_draft:
            assert usage.over_budget_bytes >= usage.draft_kv_bytes - TOLERANCE, usage.describe()
            assert usage.over_budget_bytes > TOLERANCE, usage.describe()
        else:
            # 0.5.14+: both pools inside f x free for this draft (its KV geometry is the
            # target's); what stock loses is the duplicates' bytes, shown by the eagle3 case.
            assert usage.over_budget_bytes <= TOLERANCE, usage.describe()
    if not started:
        assert ooms, log[-3000:]  # a start failure other than memory is not this regression
