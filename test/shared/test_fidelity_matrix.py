"""SGLang's documented speculative launches start as stock starts them, plugin on, but for the
budget: (a) ServerArgs, (b) target ModelConfig at pool sizing; on a CPU Engine: (c) the draft's
price is what its pools allocate, (d) ``plan`` equals the server, (e) 0.5.23: every tensor."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from harness.launch import release_suite
from harness.launch.engine import DEFAULT_CAPACITY_BYTES as CAPACITY
from harness.launch.engine import ENGINE_TEST_TIMEOUT_S
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S, KINDS, LaunchKind
from harness.launch.release_suite import assert_same_numbers, assert_weights_and_pools_fill
from harness.launch.release_suite import engine_kwargs as launch_kwargs
from harness.matrices import fidelity
from harness.matrices.fidelity import ROWS, Row
from harness.matrices.fidelity_probe import PHASES_ITSELF
from harness.reports.config_snapshot import snapshot_differences
from harness.reports.fidelity_tensors import TENSOR_REPORT_ENV
from harness.reports.report_reading import runners

if PHASES_ITSELF:
    from sglang_0_5_13.test_workers_common import (
        STOCK_WARNING,
        Launch,
        assert_phased,
        launch_cache,
        start_engine,
    )

pytestmark = [
    pytest.mark.cpu_engine,
    pytest.mark.timeout(
        ENGINE_TEST_TIMEOUT_S + fidelity.PROBE_TIMEOUT_S if PHASES_ITSELF else ENGINE_TIMEOUT_S * 3
    ),
]

ENGINE_ROWS = tuple(row for row in ROWS if row.engine is not None)
# 0.5.13.x: CI starts the one recipe Engine no other test starts (DeepSeek-V3 MTP with no draft
# path); the worker tests start the other rows' pairs. The probe checks run for every row in CI.
CI_ENGINE_ROWS = ("deepseek-v3-mtp",)
# 0.5.23: the suite's launch of the same checkpoints that CI reads for a row, and whether CI
# also has that launch with the plugin off (for (e)).
CI_LAUNCH = {
    "llama31-eagle3": ("EAGLE3", True),
    "deepseek-v3-mtp": ("MTP-deepseek-v3", True),
    "mimo-v2-flash": ("MTP-multi-layer", True),
    "gemma4-frozen-kv-mtp": ("FROZEN_KV_MTP", False),
}
MIN_VIABLE = ("min_viable_mem_fraction_static",) if PHASES_ITSELF else ()
PLAN_KEYS = (*release_suite.PLAN_KEYS, *MIN_VIABLE)


def _recipe_kwargs(row: Row) -> dict[str, Any]:
    kwargs = fidelity.engine_kwargs(row)
    kwargs.pop("model_path")
    return kwargs


# 0.5.23: one launch kind per Engine row, the recipe's own flags on device cpu (slow).
for _row in ENGINE_ROWS if not PHASES_ITSELF else ():
    _flags = dict(zip(_row.recipe, _row.recipe[1:], strict=False))  # flag -> the word after it
    KINDS.setdefault(
        f"recipe:{_row.key}",
        LaunchKind(
            _row.target,
            _row.draft or (lambda: None),
            _flags.get("--speculative-algorithm") or _flags["--speculative-algo"],
            kwargs_fn=partial(_recipe_kwargs, _row),
        ),
    )


def by_engine(*, phases_itself: bool, stock_too: bool = False) -> Any:
    """One test per plugin-on Engine of an Engine row (0.5.23: the suite's launch, then the
    recipe's own flags, slow)."""
    params = []
    for row in ENGINE_ROWS if phases_itself == PHASES_ITSELF else ():
        if PHASES_ITSELF:
            marks = [] if row.key in CI_ENGINE_ROWS else [pytest.mark.slow]
            params.append(pytest.param(row, None, id=row.key, marks=marks))
            continue
        ci = CI_LAUNCH.get(row.key)
        runs = []
        if ci is not None and (ci[1] or not stock_too):
            runs.append((ci[0], row.key, []))
        recipe_id = f"{row.key}@recipe" if runs else row.key
        runs.append((f"recipe:{row.key}", recipe_id, [pytest.mark.slow]))
        for kind, param_id, marks in runs:
            keys = [(kind, True)] + ([(kind, False)] if stock_too else [])
            params.append(
                pytest.param(row, kind, id=param_id, marks=[*marks, pytest.mark.launches(*keys)])
            )
    return pytest.mark.parametrize(("row", "kind"), params)


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Future[dict]]:
    """The probe (one run for the module), started in the background."""
    with ThreadPoolExecutor(1) as pool:
        yield pool.submit(
            fidelity.run_probe, fidelity.probe_request(), tmp_path_factory.mktemp("probe")
        )


@pytest.fixture(scope="module")
def probe(probe_run: Future[dict]) -> dict[tuple[str, str], dict[str, Any]]:
    """``{(launch, mode): result}``."""
    return probe_run.result()


def _results(probe: dict, row: Row) -> tuple[dict[str, Any], dict[str, Any]]:
    on, off = probe[(row.key, "on")], probe[(row.key, "off")]
    if row.refused is None:
        for result in (on, off):
            assert "error" not in result, result["error"]["traceback"]
    return on, off


def _start(row: Row, work_dir: Path) -> Launch:
    """0.5.13.x: the row's recipe Engine, plugin on, every KV pool's buffers reported."""
    kwargs = fidelity.engine_kwargs(row)
    return start_engine(
        kwargs.pop("model_path"),
        draft=None,
        algorithm=None,
        plugin=True,
        work_dir=work_dir,
        extra_env={TENSOR_REPORT_ENV: "1", **row.env},
        **kwargs,
    )


@pytest.fixture(scope="module")
def engines(
    tmp_path_factory: pytest.TempPathFactory, probe_run: Future[dict]
) -> Callable[[str], Launch]:
    """0.5.13.x: ``engines(key)``, the row's plugin-on CPU Engine, started once for (b)-(d)."""
    return launch_cache(tmp_path_factory, {row.key: partial(_start, row) for row in ENGINE_ROWS})


def _same_pair(row: Row, kind: str) -> None:
    """0.5.23: the launch read for ``row`` loads the row's own checkpoints."""
    spec = KINDS[kind]
    assert spec.target() == row.target()
    draft = spec.draft()
    if row.pathless:
        assert draft in (None, row.target())
    else:
        assert row.draft is not None and draft == row.draft()


@by_engine(phases_itself=False)
def test_cd_draft_price_and_plan_equal_the_server(
    engine_runs, probe_run: Future[dict], row: Row, kind: str
) -> None:
    """0.5.23: (c) the draft's price is what its pools allocate, (d) ``plan`` equals the server."""
    _same_pair(row, kind)
    run = engine_runs(kind, True)
    memory = release_suite.launched_memory(run)
    pools = [p for p in run.report["kv_pool_buffers"] if p["role"] == "draft" and p.get("parts")]
    assert pools, run.report["kv_pool_buffers"]
    # Per (sub-)pool: bytes per token row, straight from the tensors. A part holds a slot per
    # token of the target's full pool, or per token of its sliding-window pool (hybrid SWA
    # drafts, sized by the target's split), or a fixed count (frozen-KV MTP's stand-in).
    tokens = memory["tokens"]
    swa_tokens = {
        part["size"]
        for p in run.report["kv_pool_buffers"]
        if p["role"] == "target"
        for part in p.get("parts", [])
        if part["token_buffers"] and part["size"] != tokens
    }
    per_row = dict.fromkeys(("full", "swa", "fixed"), 0)
    allocated = dict.fromkeys(("full", "swa", "fixed"), 0)
    for part in (part for p in pools for part in p["parts"] if part["token_buffers"]):
        assert part["token_buffer_bytes"] % part["token_rows"] == 0, part
        size = part["size"]
        slot = "full" if size == tokens else "swa" if size in swa_tokens else "fixed"
        per_row[slot] += part["token_buffer_bytes"] // part["token_rows"]
        allocated[slot] += part["token_buffer_bytes"]
    # Bytes: the K/V buffers of the token-sized pools are what the budget charged per token,
    # those of a fixed-size pool what it charged once.
    per_token_pools, fixed = allocated["full"] + allocated["swa"], allocated["fixed"]
    assert per_token_pools + fixed > 0
    assert per_token_pools == memory["draft_kv_pool_bytes"]
    assert fixed == memory["draft_fixed_pool_bytes"]
    (swa_size,) = swa_tokens or {0}
    per_token = per_row["full"] + per_row["swa"] * swa_size / tokens
    # The budget's price per token of the target's pool, to the byte it reports.
    assert abs(memory["draft_kv_bytes_per_token"] - per_token) < 1, (per_row, per_token)
    print(f"{row.key}: draft pools {per_token_pools} + {fixed} fixed B, {per_row} B per slot")

    kwargs = launch_kwargs(kind)
    # The Engine filled its budget with weights and pools.
    used, budget = assert_weights_and_pools_fill(run, kwargs["mem_fraction_static"])
    print(f"{row.key}: weights + pools {used} of {budget} B ({used / budget:.6f})")
    # (This launch's row of the verdict table: test/conftest.py's plan_every_started_launch.)
    planned = fidelity.plan_for_server(row, kwargs, memory, CAPACITY)
    assert_same_numbers(planned, memory, PLAN_KEYS)


@by_engine(stock_too=True, phases_itself=False)
def test_e_every_tensor_equals_stock_after_init(engine_runs, row: Row, kind: str) -> None:
    ours, stock = engine_runs(kind, True), engine_runs(kind, False)
    assert ours.report["specinit_loaded"] and not stock.report["specinit_loaded"]
    mine, theirs = ours.report["tensors"], stock.report["tensors"]
    assert set(mine) == set(theirs)
    differing = {}
    unloaded = {}
    for name in sorted(theirs):
        a, b = mine[name], theirs[name]
        if a == b:
            continue
        loaded = _rows_loaded_from_checkpoint(row, name)
        if loaded is not None and _equal_but_rows(dict(a), dict(b), loaded):
            unloaded[name] = f"rows {loaded.stop}..{b['shape'][0] - 1} not in the checkpoint"
            continue
        differing[name] = (a, b)
    assert differing == {}
    # What was compared: both models, and (where the draft binds them) the draft tensors stock
    # shares with the target, so an early binding that bound something else would differ.
    assert any(n.startswith("target/") for n in theirs)
    assert any(n.startswith("draft") for n in theirs)
    shared = sorted(
        n for n, t in theirs.items() if n.startswith("draft") and t["owner"].startswith("target/")
    )
    hot = {n: theirs[n]["owner"] for n in theirs if n.endswith("hot_token_id")}
    print(f"{row.key}: {len(theirs)} tensors equal; shared with the target: {shared}; hot: {hot}")
    if unloaded:
        print(
            f"  never loaded by SGLang (uninitialized in stock too), compared without: {unloaded}"
        )


def _equal_but_rows(a: dict[str, Any], b: dict[str, Any], loaded: range) -> bool:
    """Same tensor (shape, dtype, storage owner) whose rows ``loaded`` are equal."""
    rows_a, rows_b = (t.pop("row_sha256", None) for t in (a, b))
    rows = slice(loaded.start, loaded.stop)
    same = {**a, "sha256": None} == {**b, "sha256": None}
    return same and None not in (rows_a, rows_b) and rows_a[rows] == rows_b[rows]


def _rows_loaded_from_checkpoint(row: Row, name: str) -> range | None:
    """The rows of a draft's fused QKV SGLang fills from a checkpoint holding only ``q_proj``."""
    role, _, param = name.partition("/")
    if not role.startswith("draft") or not param.endswith("self_attn.qkv_proj.weight"):
        return None
    from safetensors import safe_open

    checkpoint = row.draft() if row.draft is not None else row.target()
    prefix = param[: -len("qkv_proj.weight")]
    shapes: dict[str, list[int]] = {}
    for path in sorted(checkpoint.glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            for key in f.keys():
                if key.startswith(prefix):
                    shapes[key[len(prefix) :]] = list(f.get_slice(key).get_shape())
    if "k_proj.weight" in shapes or "v_proj.weight" in shapes or "q_proj.weight" not in shapes:
        return None
    return range(0, shapes["q_proj.weight"][0])


@by_engine(phases_itself=True)
def test_bcd_recipe_engine_0513(
    probe: dict, engines: Callable[[str], Launch], row: Row, kind: None
) -> None:
    """0.5.13.x, the row's recipe Engine: (b), (c), and (d) through the four phases."""
    run = engines(row.key)
    assert_phased(run, run.report["scheduler"]["spec_algorithm"])
    before = run.report["target_config_before_pool"]
    at_pool = run.report["target_config_at_pool_sizing"]
    assert before is not None and at_pool is not None
    assert snapshot_differences(at_pool, before) == []
    stock = probe[(f"{row.key}@cpu", "off")]
    assert "error" not in stock, stock["error"]["traceback"]
    stock_config = stock["target_before_draft"]
    # Attributes SGLang's loader adds (``_resolved_model_arch`` ...) are not stock's to compare.
    assert {k: before["attributes"].get(k) for k in stock_config["attributes"]} == (
        stock_config["attributes"]
    )
    # What the original bug rewrote in the target's config (architecture and layer counts).
    for key in ("architectures", "num_hidden_layers", "num_nextn_predict_layers"):
        assert before["hf_config"].get(key) == stock_config["hf_config"].get(key), key

    priced = _results(probe, row)[0]["draft_layers_before_load"]
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

    planned = fidelity.plan_for_server(row, fidelity.engine_kwargs(row), run.breakdown, CAPACITY)
    assert_same_numbers(planned, run.breakdown, PLAN_KEYS)
    assert set(PLAN_KEYS) <= set(planned) & set(run.breakdown)
    # What SGLang really allocated for the K/V buffers is what the planner predicted (a
    # draft's fixed-size pool, frozen-KV MTP's stand-in, included).
    assert run.breakdown["allocated_target_kv_pool_bytes"] == planned["target_kv_pool_bytes"]
    assert run.breakdown["allocated_draft_kv_pool_bytes"] == (
        planned["draft_kv_pool_bytes"] + planned["draft_fixed_pool_bytes"]
    )


@pytest.mark.parametrize("row", ROWS, ids=[row.key for row in ROWS])
def test_ab_server_args_and_target_config_equal_stock(probe: dict, row: Row) -> None:
    """(a) ServerArgs equal stock's (a refused row is refused alike); (b) the target's config is
    stock's when its pool is sized; 0.5.13.x: an unphased launch keeps stock's init, one warning."""
    on, off = _results(probe, row)
    if row.refused is not None:
        assert on["error"]["step"] == "ServerArgs"
        for key in ("step", "type", "message"):
            assert on["error"][key] == off["error"][key], key
        assert row.refused in on["error"]["message"]
        return
    differences = fidelity.server_args_differences(on, off)
    assert on["env_set_by_server_args"] == off["env_set_by_server_args"]
    algorithm = off["server_args"]["speculative_algorithm"]
    reserve = fidelity.DRAFT_RESERVE_MIB.get(algorithm, fidelity.DEFAULT_DRAFT_RESERVE_MIB)
    if PHASES_ITSELF and "fraction_without_spec_term" in off and row.phased and reserve:
        ours, stock = differences.pop("mem_fraction_static")
        assert ours == off["fraction_without_spec_term"]
        # Stock's heuristic took the flat draft reserve on top (both values rounded to 3 places).
        assert abs((ours - stock) - reserve / off["gpu_mem_mib"]) <= 0.0011
        assert off["gpu_mem_mib"] == fidelity.GPU.total_mib
    assert differences == {}
    if not PHASES_ITSELF:
        assert fidelity.server_args_differences(on, off, "server_args_input") == {}
        # What was compared includes what the device decides: the graph batch lists and the
        # fraction (automatic where the recipe gives none) as resolved for the H100 double.
        graphs = off["server_args"]["cuda_graph_config"]
        assert graphs["decode"]["bs"] and graphs["prefill"]["bs"], graphs
        assert 0 < off["server_args"]["mem_fraction_static"] < 1
    if PHASES_ITSELF and not row.phased:
        # Stock reserve: the automatic fraction is stock's (no field differs, above).
        assert "fraction_without_spec_term" in off
        assert on["server_args"]["mem_fraction_static"] == off["server_args"]["mem_fraction_static"]
        assert on["server_args"]["mem_fraction_static"] < off["fraction_without_spec_term"]
        for result in (on, off):
            check = result["scheduler_check"]
            # SGLang's own init_model_worker ran: its first call is the target worker, built the
            # stock way (no deferred pools, no phase log), with the fraction untouched.
            assert check["reached_init_tp_model_worker"]
            assert check["deferring_pools_per_call"] == [False]
            assert not check["phase_log_started"]
            assert check["mem_fraction_static_after"] == check["mem_fraction_static_before"]
        warnings = [
            r["message"]
            for r in on["records"]
            if r["logger"].startswith("sglang_specinit") and r["level"] == "WARNING"
        ]
        assert len(warnings) == 1 and warnings[0].startswith(STOCK_WARNING), warnings
        assert not [r for r in off["records"] if r["logger"].startswith("sglang_specinit")]

    stock = off["target_before_draft"]
    assert snapshot_differences(on["target_before_draft"], stock) == []
    if "draft" not in off:  # no draft model (NGRAM)
        assert "draft" not in on
        return
    # At pool sizing (both workers built): the target and the scheduler's copy as stock has
    # them (0.5.13.x: as before the draft, which stock's order rewrites in a path-less target;
    # 0.5.23: as stock has them then), and the draft config built as stock builds it.
    when = "before" if PHASES_ITSELF else "after"
    assert snapshot_differences(on["target_after_draft"], off[f"target_{when}_draft"]) == []
    assert snapshot_differences(on["scheduler_after_draft"], off[f"scheduler_{when}_draft"]) == []
    assert snapshot_differences(on["draft"], off["draft"]) == []
    assert on["draft_model_path_used"] == off["draft_model_path_used"]
    if PHASES_ITSELF:
        if row.pathless:
            assert on["draft_model_path_used"] == stock["attributes"]["model_path"]
            # Control: the same order without the plugin's isolation rewrites the target.
            rewritten = snapshot_differences(off["target_after_draft"], stock)
            assert any(d.startswith("hf_config.architectures") for d in rewritten), rewritten
        return
    # Stock 0.5.23 itself leaves the target's config as it was before the draft was built.
    assert snapshot_differences(off["target_after_draft"], stock) == []
    # Control: the draft's config is its own object and differs from the target's, so a draft
    # build that rewrote a shared config would show in the comparisons above.
    for result in (on, off):
        assert not result["draft_shares_hf_config_with_target"]
    assert any(d.startswith("hf_config.") for d in snapshot_differences(off["draft"], stock))
    if row.pathless:
        # A path-less MTP draft is read from the target's own checkpoint and gets the NextN
        # architecture: what a shared config would have written into the target.
        assert off["draft_model_path_used"] == stock["attributes"]["model_path"]
        assert off["draft"]["hf_config"]["architectures"] != stock["hf_config"]["architectures"]
