"""Fidelity matrix: SGLang's own documented speculative launches start as in stock SGLang,
plugin on, except for the memory budget. Per row of :data:`harness.matrices.fidelity.ROWS`:
(a) ServerArgs equal stock's (an automatic fraction: less the draft term only); (b) the target's
ModelConfig at pool sizing equals stock's; (c) the draft layers priced equal those allocated;
(d) where an Engine runs on CPU, ``plan --resident-bytes`` equals the server's pools."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from harness.launch.engine import DEFAULT_CAPACITY_BYTES, ENGINE_TEST_TIMEOUT_S, cpu_engine
from harness.matrices import fidelity
from harness.matrices.fidelity import ROWS, Row
from harness.matrices.plan_verdicts import VERDICT_PROPERTY
from harness.reports.config_snapshot import snapshot_differences
from harness.reports.fidelity_tensors import TENSOR_REPORT_ENV
from harness.reports.report_reading import REPORT_DIR_ENV, read_breakdown, runners
from harness.selection import slow_enabled, slow_skip_reason
from test_workers_common import STOCK_WARNING, Launch, assert_phased, launch_cache

pytestmark = pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S + fidelity.PROBE_TIMEOUT_S)

ENGINE_ROWS = tuple(row for row in ROWS if row.engine is not None)
# CPU Engines cost ~40 s each (SGLang's imports, twice). CI starts the one no other test starts:
# DeepSeek-V3 MTP with no draft path (the launch whose target config the draft used to rewrite).
# The other rows' pairs are started by the worker tests (EAGLE/EAGLE3, STANDALONE, DFLASH,
# multi-layer EAGLE, frozen-KV MTP); their recipe Engines run with SPECINIT_TEST_SLOW=1. The
# probe checks (a), (b) and the read-before-loading half of (c) run for every row in CI.
CI_ENGINE_ROWS = ("deepseek-v3-mtp",)
PLAN_KEYS = (
    "tokens",
    "max_running_requests",
    "target_kv_bytes_per_token",
    "draft_kv_bytes_per_token",
    "budget_bytes",
    "min_viable_mem_fraction_static",
    "target_kv_pool_bytes",
    "draft_kv_pool_bytes",
    "draft_fixed_pool_bytes",
)


def by_key(rows: tuple[Row, ...]) -> Any:
    return pytest.mark.parametrize("row", rows, ids=[row.key for row in rows])


def by_engine_key(rows: tuple[Row, ...]) -> Any:
    """``by_key`` for tests that need the row's Engine: rows outside CI_ENGINE_ROWS are slow."""
    return pytest.mark.parametrize(
        "row",
        [
            pytest.param(row, id=row.key)
            if row.key in CI_ENGINE_ROWS
            else pytest.param(row, id=row.key, marks=pytest.mark.slow)
            for row in rows
        ],
    )


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Future[dict]]:
    """The probe (one run for the whole module), started in the background: the Engine-only
    (d) tests run first, meanwhile."""
    with ThreadPoolExecutor(1) as pool:
        yield pool.submit(
            fidelity.run_probe, fidelity.probe_request(), tmp_path_factory.mktemp("probe")
        )


@pytest.fixture(scope="module")
def probe(probe_run: Future[dict]) -> dict[tuple[str, str], dict[str, Any]]:
    """Every row's probe results, plugin on and off: ``{(launch, mode): result}``."""
    return probe_run.result()


def _results(probe: dict, row: Row) -> tuple[dict[str, Any], dict[str, Any]]:
    on, off = probe[(row.key, "on")], probe[(row.key, "off")]
    if row.refused is None:
        for result in (on, off):
            assert "error" not in result, result["error"]["traceback"]
    return on, off


def _skip_refused(row: Row) -> None:
    if row.refused is not None:
        pytest.skip(f"SGLang 0.5.13.post1 refuses this command: {row.refused} (checked in (a))")


def _start(row: Row) -> Callable[[Path], Launch]:
    def start(work_dir: Path) -> Launch:
        kwargs = fidelity.engine_kwargs(row)
        model_path = kwargs.pop("model_path")
        specinit_dir = work_dir / "specinit"
        specinit_dir.mkdir(parents=True)
        with cpu_engine(
            model_path,
            plugin=True,
            work_dir=work_dir,
            # Every KV pool's buffers in the scheduler report, counted for (c).
            extra_env={REPORT_DIR_ENV: str(specinit_dir), TENSOR_REPORT_ENV: "1", **row.env},
            **kwargs,
        ) as engine:
            report = engine.scheduler_report()
        return Launch(
            plugin=True,
            report=report,
            breakdown=read_breakdown(specinit_dir),
            log=engine.log_path.read_text(errors="replace"),
            startup_s=engine.startup_s,
        )

    return start


@pytest.fixture(scope="module")
def engines(
    tmp_path_factory: pytest.TempPathFactory, probe_run: Future[dict]
) -> Callable[[str], Launch]:
    """``engines(key)``: the row's plugin-on CPU Engine, started once for (b), (c) and (d)."""
    return launch_cache(tmp_path_factory, {row.key: _start(row) for row in ENGINE_ROWS})


_plans: dict[str, dict[str, Any]] = {}


def _plan(row: Row, run: Launch) -> dict[str, Any]:
    """``sglang-specinit plan --json`` for the row's Engine flags and measured device numbers."""
    assert run.breakdown is not None
    if row.key not in _plans:
        _plans[row.key] = fidelity.plan_for_server(
            row, fidelity.engine_kwargs(row), run.breakdown, DEFAULT_CAPACITY_BYTES
        )
    return _plans[row.key]


def _engine_or_skip(row: Row, engines: Callable[[str], Launch]) -> Launch:
    if row.engine is None:
        pytest.skip(f"no CPU Engine: {row.engine_blocker}")
    if row.key not in CI_ENGINE_ROWS and not slow_enabled():
        pytest.skip(f"this row's recipe Engine: {slow_skip_reason()}")
    return engines(row.key)


@by_key(ROWS)
def test_d_engine_comes_up_through_the_four_phases(
    engines: Callable[[str], Launch], row: Row
) -> None:
    _skip_refused(row)
    if not row.phased:
        pytest.skip(f"not phased (stock init): {row.engine_blocker}")
    run = _engine_or_skip(row, engines)
    assert_phased(run, run.report["scheduler"]["spec_algorithm"])


@by_engine_key(ENGINE_ROWS)
def test_d_plan_equals_server(
    engines: Callable[[str], Launch], row: Row, request: pytest.FixtureRequest
) -> None:
    run = engines(row.key)
    planned = _plan(row, run)
    # The Engine came up and plan_for_server held plan to exit 0: a row of the verdict table.
    request.node.user_properties.append((VERDICT_PROPERTY, (row.key, "starts", "starts")))
    differing = {
        key: (planned[key], run.breakdown[key])
        for key in PLAN_KEYS
        if planned[key] != run.breakdown[key]
    }
    assert differing == {}, (planned, run.breakdown)
    # What SGLang really allocated for the K/V buffers is what the planner predicted (a draft's
    # fixed-size pool, frozen-KV MTP's stand-in, included).
    assert run.breakdown["allocated_target_kv_pool_bytes"] == planned["target_kv_pool_bytes"]
    assert run.breakdown["allocated_draft_kv_pool_bytes"] == (
        planned["draft_kv_pool_bytes"] + planned["draft_fixed_pool_bytes"]
    )


@by_key(ROWS)
def test_c_draft_layers_priced_equal_allocated(
    probe: dict, engines: Callable[[str], Launch], row: Row
) -> None:
    _skip_refused(row)
    on, off = _results(probe, row)
    if "draft" not in off:
        pytest.skip("no draft model (NGRAM drafts from the request's own tokens)")
    priced = on["draft_layers_before_load"]
    run = _engine_or_skip(row, engines)
    drafts = runners(run.report, "draft")
    assert drafts, run.report["model_runners"]
    # SGLang's own runner attribute, per draft runner (multi-layer EAGLE has one per step).
    assert [r["num_effective_layers"] for r in drafts] == [priced] * len(drafts)
    # The layer buffers each draft pool really holds (one K or latent buffer per layer, split
    # between the full and sliding-window sub-pools of a hybrid pool), for pools sized by the
    # target's token counts (a fixed-size stand-in, frozen-KV MTP's, reads the target's KV).
    tokens = run.breakdown["tokens"]
    pools = [p for p in run.report["kv_pool_buffers"] if p.get("parts")]
    target_sizes = {part["size"] for p in pools if p["role"] == "target" for part in p["parts"]}
    counted = 0
    draft_parts = []
    for pool in (p for p in pools if p["role"] == "draft"):
        parts = [part for part in pool["parts"] if part["token_buffers"]]
        draft_parts += parts
        if parts and all(part["size"] in target_sizes for part in parts):
            assert sum(part["layer_buffers"] or 0 for part in parts) == priced, pool
            counted += 1
    if draft_parts and all(part["size"] == tokens for part in draft_parts):
        # One slot per token of the target's pool: the price per token from the tensors.
        per_token = sum(part["token_buffer_bytes"] // part["token_rows"] for part in draft_parts)
        assert per_token == run.breakdown["draft_kv_bytes_per_token"]
    print(f"{row.key}: {priced} draft layers priced; {counted} draft pools counted")


@by_key(ROWS)
def test_b_target_config_equal_stock_when_its_pool_is_sized(probe: dict, row: Row) -> None:
    _skip_refused(row)
    on, off = _results(probe, row)
    stock = off["target_before_draft"]
    assert snapshot_differences(on["target_before_draft"], stock) == []
    if "draft" not in off:  # no draft model (NGRAM)
        assert "draft" not in on
        return
    # The phased init builds the draft before the target pool is sized: the target, and the
    # scheduler's own copy, must still be stock's.
    assert snapshot_differences(on["target_after_draft"], stock) == []
    assert snapshot_differences(on["scheduler_after_draft"], off["scheduler_before_draft"]) == []
    # The draft config itself is built as stock builds it.
    assert snapshot_differences(on["draft"], off["draft"]) == []
    assert on["draft_model_path_used"] == off["draft_model_path_used"]
    if row.pathless:
        assert on["draft_model_path_used"] == stock["attributes"]["model_path"]
        # Control: the same order without the plugin's isolation rewrites the target.
        rewritten = snapshot_differences(off["target_after_draft"], stock)
        assert any(d.startswith("hf_config.architectures") for d in rewritten), rewritten


# What the original bug rewrote in the target's config (architecture and layer counts).
CRITICAL_HF_KEYS = ("architectures", "num_hidden_layers", "num_nextn_predict_layers")


@by_engine_key(ENGINE_ROWS)
def test_b_engine_target_config_at_pool_sizing(
    probe: dict, engines: Callable[[str], Launch], row: Row
) -> None:
    run = engines(row.key)
    before, at_pool = (
        run.report["target_config_before_pool"],
        run.report["target_config_at_pool_sizing"],
    )
    assert before is not None and at_pool is not None
    assert snapshot_differences(at_pool, before) == []
    stock = probe[(f"{row.key}@cpu", "off")]
    assert "error" not in stock, stock["error"]["traceback"]
    stock_config = stock["target_before_draft"]
    # Attributes SGLang's loader adds (``_resolved_model_arch`` ...) are not stock's to compare.
    assert {k: before["attributes"].get(k) for k in stock_config["attributes"]} == (
        stock_config["attributes"]
    )
    for key in CRITICAL_HF_KEYS:
        assert before["hf_config"].get(key) == stock_config["hf_config"].get(key), key


@by_key(ROWS)
def test_a_server_args_equal_stock(probe: dict, row: Row) -> None:
    on, off = _results(probe, row)
    if row.refused is not None:
        assert on["error"]["step"] == off["error"]["step"] == "ServerArgs"
        assert (on["error"]["type"], on["error"]["message"]) == (
            off["error"]["type"],
            off["error"]["message"],
        )
        assert row.refused in on["error"]["message"]
        return
    differences = fidelity.server_args_differences(on, off)
    assert on["env_set_by_server_args"] == off["env_set_by_server_args"]
    algorithm = off["server_args"]["speculative_algorithm"]
    reserve = fidelity.draft_reserve_mib(algorithm)
    automatic = "fraction_without_spec_term" in off
    if not (automatic and row.phased and reserve):
        assert differences == {}
        return
    assert set(differences) == {"mem_fraction_static"}, differences
    ours, stock = differences["mem_fraction_static"]
    assert ours == off["fraction_without_spec_term"]
    # Stock's heuristic took the flat draft reserve on top (both values rounded to 3 places).
    assert abs((ours - stock) - reserve / off["gpu_mem_mib"]) <= 0.0011
    assert off["gpu_mem_mib"] == fidelity.GPU.total_mib


@by_key(tuple(row for row in ROWS if not row.phased))
def test_unphased_launch_keeps_stock_init_with_one_warning(probe: dict, row: Row) -> None:
    on, off = _results(probe, row)
    # Stock reserve: the automatic fraction is stock's (test_a: no field differs).
    assert "fraction_without_spec_term" in off
    assert on["server_args"]["mem_fraction_static"] == off["server_args"]["mem_fraction_static"]
    assert on["server_args"]["mem_fraction_static"] < off["fraction_without_spec_term"]
    for result in (on, off):
        check = result["scheduler_check"]
        # SGLang's own init_model_worker ran: its first call is the target worker, built the
        # stock way (no deferred pools, no phase log), with the fraction untouched.
        assert check["reached_init_tp_model_worker"]
        assert [c["deferring_pools"] for c in check["calls"]] == [False]
        assert not check["phase_log_started"]
        assert check["mem_fraction_static_after"] == check["mem_fraction_static_before"]
    warnings = [
        r["message"]
        for r in on["records"]
        if r["logger"].startswith("sglang_specinit") and r["level"] == "WARNING"
    ]
    assert len(warnings) == 1 and warnings[0].startswith(STOCK_WARNING), warnings
    assert not [r for r in off["records"] if r["logger"].startswith("sglang_specinit")]
