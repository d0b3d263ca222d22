"""Real servers on a GPU: each case fits its budget and fills it, and serves exactly what stock
SGLang serves (same greedy tokens, drafts accepted as often, CUDA graphs captured); a full KV
cache is served without running out of memory; and stock SGLang overshoots the budget.

Every launch is ``python -m sglang.launch_server`` at ``--mem-fraction-static 0.9`` (or
``SPECINIT_GPU_MEM_FRACTION``) with the models of the selected profile
(:mod:`harness.gpu.gpu_cases`). What each test measures (the verdicts are
:mod:`harness.gpu.gpu_verdict`, exercised on recorded inputs by ``test/unit/test_gpu_verdict.py``):

- device memory: the probe (:mod:`harness.reports.device_probe`) reads SGLang's own free-memory
  meter in the scheduler process at the pre-load reading and around every KV pool allocation; the
  memory held once the last pool exists, less SGLang's unbudgeted tables and what its
  allocator and kernel loading add, is compared with ``f x free before loading``, and what
  weights, KV and the non-tensor residue leave of it with one page per pool;
- tokens and drafts: the plugin-on server and a stock server with the same arguments answer
  the same greedy prompts; ``output_ids`` must be equal and the acceptance rates
  (:mod:`harness.gpu.spec_metrics`) within a binomial noise bound;
- graphs: the start-up log's ``Capture ... cuda graph end`` lines and ``/server_info``'s graph
  memory;
- load: requests that fill the KV pool (SGLang's own ``/v1/loads`` count) all finish
  (:mod:`harness.gpu.load`), with no out-of-memory error logged after the server became healthy.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpu_server import GpuServer, breakdowns, gpu_server, probe_records, server_log
from harness.gpu import gpu_cases, gpu_verdict, load, spec_metrics
from harness.launch.server_process import SGLangStartError
from harness.reports import device_probe

pytestmark = pytest.mark.gpu

CASES = gpu_cases.cases()
MAX_NEW_TOKENS = 96
# The check passes when the counted memory is within this of the budget (see device_probe).
TOLERANCE = device_probe.BOOKKEEPING_TOLERANCE_BYTES
# Peak share of the KV pool held by running requests that the load must reach. SGLang admits
# a request only with room for part of its future output, so the pool is never quite 100 %.
FILLED = 0.85
Wait = Callable[[int], Any]


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def _require(case: gpu_cases.Case) -> None:
    if case.skip:
        pytest.skip(f"{case.name}: {case.skip}")
    if _gpu_count() < case.tp:
        pytest.skip(f"{case.name} needs {case.tp} GPUs, this runner has {_gpu_count()}")


def _generate(server: GpuServer, prompt: str) -> dict[str, Any]:
    return server.post(
        "/generate",
        {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS}},
        timeout_s=600,
    )


def _memory_usage(work_dir: Path) -> list[device_probe.UsageAfterPools]:
    return [device_probe.usage_after_pools(records) for records in probe_records(work_dir)]


def _pool_allocations(records: list[dict[str, Any]]) -> int:
    return sum(r["event"] == "exit" and r["method"] == device_probe.POOL_METHOD for r in records)


def _serve_prompts(
    case: gpu_cases.Case, work_dir: Path, *, plugin: bool, fraction: str, wait: Wait
) -> tuple[GpuServer, dict[str, Any], list[dict[str, Any]]]:
    """Launch, answer the case's greedy prompts one at a time, read /server_info, tear down."""
    wait(case.tp)
    with gpu_server(case, work_dir, plugin=plugin, mem_fraction=fraction) as server:
        info = server.server_info()
        responses = [_generate(server, prompt) for prompt in gpu_cases.PROMPTS]
    return server, info, responses


def _stock_for_comparison(
    case: gpu_cases.Case, tmp_path: Path, wait: Wait, record_property: Any
) -> tuple[GpuServer, dict[str, Any], list[dict[str, Any]]]:
    """Stock SGLang with the case's arguments; if it runs out of memory at ``f`` (the
    regression this plugin fixes), again at the lower stock fraction: greedy tokens do not
    depend on the pool size, which differs between the two servers anyway."""
    fraction = gpu_cases.mem_fraction()
    try:
        return _serve_prompts(case, tmp_path / "stock", plugin=False, fraction=fraction, wait=wait)
    except SGLangStartError as error:
        if not gpu_verdict.oom_lines(str(error)):
            raise
        lower = gpu_cases.stock_mem_fraction()
        record_property("stock_start", f"out of memory at f={fraction}; compared at f={lower}")
        return _serve_prompts(
            case, tmp_path / "stock-lower-f", plugin=False, fraction=lower, wait=wait
        )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_fits_its_budget_and_matches_stock(
    case: gpu_cases.Case, tmp_path: Path, wait_for_released_devices: Wait, record_property: Any
) -> None:
    """The case with the plugin on, then stock with the same arguments (the GPU smoke is the
    ``eagle3`` instance of this test)."""
    _require(case)
    fraction = gpu_cases.mem_fraction()
    on_dir = tmp_path / "plugin"
    server, info, responses = _serve_prompts(
        case, on_dir, plugin=True, fraction=fraction, wait=wait_for_released_devices
    )
    ranks = breakdowns(server)
    usages = _memory_usage(on_dir)
    log_tail = server.log_tail()
    stock, stock_info, stock_responses = _stock_for_comparison(
        case, tmp_path, wait_for_released_devices, record_property
    )
    assert not breakdowns(stock), "the plugin was not off in the stock launch"

    # Launched as the case says (the two EAGLE3 cases differ only here).
    assert info["speculative_algorithm"] == case.algorithm
    assert info["enable_multi_layer_eagle"] == ("--enable-multi-layer-eagle" in case.args)
    assert info["disable_overlap_schedule"] == (not case.overlap), info["disable_overlap_schedule"]

    # One breakdown and one probed scheduler per rank; the server serves the planned pool.
    assert [b["tp_rank"] for b in ranks] == list(range(case.tp)), log_tail
    assert len(usages) == case.tp, log_tail
    assert info["max_total_num_tokens"] == ranks[0]["tokens"]
    for rank, (b, usage) in enumerate(zip(ranks, usages, strict=True)):
        record_property(f"memory_rank{rank}", usage.describe())
        # TP > 1 ranks are measured against the smallest rank's pre-load reading, which leaves
        # a richer rank short by the difference: the fill is checked at TP 1 only here (the TP 2
        # test checks it on the tightest rank).
        assert gpu_verdict.memory_problems(b, usage, fill=case.tp == 1) == []

    # CUDA graphs: captured by both servers, the same kinds.
    expect_draft = gpu_verdict.expected_draft_graph(case.args)
    graphs = gpu_verdict.GraphCapture.from_log(server.startup_log())
    stock_graphs = gpu_verdict.GraphCapture.from_log(stock.startup_log())
    record_property("graphs", f"plugin {graphs}; stock {stock_graphs}")
    assert gpu_verdict.graph_problems(graphs, info, expect_draft) == []
    assert gpu_verdict.graph_problems(stock_graphs, stock_info, expect_draft) == []
    assert gpu_verdict.same_graph_kinds(graphs, stock_graphs) == []

    # Tokens and drafts: what stock serves, token for token, drafts accepted as often.
    assert gpu_verdict.greedy_problems(gpu_cases.PROMPTS, responses, stock_responses) == []
    stats = [spec_metrics.DraftStats.from_meta_info(r["meta_info"]) for r in responses]
    assert all(s.verify_steps > 0 for s in stats), stats
    total, stock_total = spec_metrics.summed(responses), spec_metrics.summed(stock_responses)
    record_property(
        "drafts",
        f"plugin {total.correct_drafts}/{total.proposed_drafts} ({total.accept_rate:.1%}), "
        f"stock {stock_total.correct_drafts}/{stock_total.proposed_drafts} "
        f"({stock_total.accept_rate:.1%}), bound "
        f"{gpu_verdict.acceptance_bound(total, stock_total):.3f}",
    )
    assert gpu_verdict.acceptance_problems(total, stock_total) == []
    assert gpu_verdict.oom_lines(server.log_after_ready()) == []


def _eagle3() -> gpu_cases.Case:
    case = gpu_cases.case("eagle3")
    _require(case)
    return case


def _fill_plan(info: dict[str, Any]) -> load.LoadPlan:
    """Requests that overfill the pool, as many as the server runs at once."""
    (state,) = info["internal_states"][:1]
    return load.plan_fill(
        info["max_total_num_tokens"],
        info["max_req_input_len"],
        state["effective_max_running_requests_per_dp"],
    )


def test_full_kv_cache_is_served_without_running_out_of_memory(
    tmp_path: Path, wait_for_released_devices: Wait
) -> None:
    """At f = 0.9 the 1 - f share must still hold activations and graphs at full occupancy."""
    case = _eagle3()
    wait_for_released_devices(case.tp)
    with gpu_server(case, tmp_path, plugin=True, mem_fraction=gpu_cases.mem_fraction()) as server:
        info = server.server_info()
        result = load.run_load(server.base_url, _fill_plan(info))
        healthy_after = server.healthy()
    assert result.failed == [] and result.short == [], result.summary()
    assert result.peak_usage >= FILLED, result.summary()
    assert healthy_after, result.summary()
    # Only what was logged while serving: start-up lines are not this test's business.
    assert gpu_verdict.oom_lines(server.log_after_ready()) == [], result.summary()


def test_stock_sglang_overshoots_the_same_budget(
    tmp_path: Path, wait_for_released_devices: Wait, record_property: Any
) -> None:
    """The regression the plugin exists for, on the same launch as the eagle3 case.

    Stock 0.5.13.post1 sizes the target pool from the whole budget before the draft exists;
    the draft's weights and KV pool land on top. Measured with the same probe as the cases
    above, once both pools exist it exceeds ``f x free`` by at least its draft's KV pool. If
    the overshoot leaves too little of the ``1 - f`` share, stock dies of an OOM instead
    (before or after its draft pool); that is asserted from its log. When it does start, the
    same KV-filling load is run and its outcome recorded (``stock_load``), not asserted.
    """
    case = _eagle3()
    fraction = gpu_cases.mem_fraction()
    started = True
    wait_for_released_devices(case.tp)
    try:
        with gpu_server(case, tmp_path, plugin=False, mem_fraction=fraction) as server:
            assert not breakdowns(server)  # the plugin really was off
            result = load.run_load(server.base_url, _fill_plan(server.server_info()))
            record_property("stock_load", f"{result.summary()}; healthy: {server.healthy()}")
    except SGLangStartError as error:
        started = False
        record_property("stock_start", str(error)[-2000:])
    log = server_log(tmp_path)
    records = probe_records(tmp_path)
    assert len(records) == case.tp, log[-3000:]
    ooms = gpu_verdict.oom_lines(log)  # the whole log: stock may die of it during start-up
    for rank_records in records:
        if _pool_allocations(rank_records) < 2:  # died before its draft pool existed
            assert not started and ooms, log[-3000:]
            continue
        usage = device_probe.usage_after_pools(rank_records)
        record_property("stock_memory", usage.describe())
        assert usage.draft_kv_bytes > 0, usage.describe()
        assert usage.over_budget_bytes >= usage.draft_kv_bytes - TOLERANCE, usage.describe()
        assert usage.over_budget_bytes > TOLERANCE, usage.describe()
    if not started:
        assert ooms, log[-3000:]  # a start failure other than memory is not this regression
