"""Fidelity matrix on 0.5.23: documented launches start as stock 0.5.23 starts them, plugin on,
but for the budget. Per row: (a) resolved ServerArgs, (b) ModelConfigs at pool sizing equal
stock's; Engine rows: (c) the draft's price is what its pools allocate, (d) the budget is filled
and ``plan`` equals the server, (e) every tensor and storage sharing after init is stock's."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from harness.launch.engine import DEFAULT_CAPACITY_BYTES, cpu_engine_kwargs
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S, KINDS, LaunchKind, launch_overrides
from harness.matrices import fidelity_0523
from harness.matrices.fidelity import Row
from harness.matrices.fidelity_0523 import ROWS
from harness.matrices.plan_verdicts import VERDICT_PROPERTY
from harness.reports.config_snapshot import snapshot_differences

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TIMEOUT_S * 3)]

# The suite's launch of the same checkpoints that CI reads for a row, and whether CI also has
# that launch with the plugin off (for (e)).
CI_LAUNCH = {
    "llama31-eagle3": ("EAGLE3", True),
    "deepseek-v3-mtp": ("MTP-deepseek-v3", True),
    "mimo-v2-flash": ("MTP-multi-layer", True),
    "gemma4-frozen-kv-mtp": ("FROZEN_KV_MTP", False),
}


def recipe_kind(row: Row) -> str:
    return f"recipe:{row.key}"


def _register_recipe_launches() -> None:
    """One launch kind per Engine row: the recipe's own flags on device cpu (slow)."""
    for row in ROWS:
        if row.engine is None or recipe_kind(row) in KINDS:
            continue

        def recipe_kwargs(row: Row = row) -> dict[str, Any]:
            kwargs = fidelity_0523.engine_kwargs(row)
            kwargs.pop("model_path")
            return kwargs

        KINDS[recipe_kind(row)] = LaunchKind(
            row.target,
            row.draft or (lambda: None),
            fidelity_0523.recipe_algorithm(row),
            kwargs_fn=recipe_kwargs,
        )


_register_recipe_launches()
ENGINE_ROWS = tuple(row for row in ROWS if row.engine is not None)
PLAN_KEYS = (
    "tokens",
    "max_running_requests",
    "target_kv_bytes_per_token",
    "draft_kv_bytes_per_token",
    "budget_bytes",
    "target_kv_pool_bytes",
    "draft_kv_pool_bytes",
    "draft_fixed_pool_bytes",
)


def _engine_params(stock_too: bool) -> list[Any]:
    """Per Engine row: the suite's launch of the same checkpoints where CI has it (id: the row),
    and the recipe's own flags on device cpu (slow; id ``<row>@recipe`` where CI has the
    first), each marked with the launches it reads."""
    params = []
    for row in ENGINE_ROWS:
        ci = CI_LAUNCH.get(row.key)
        runs = []
        if ci is not None and (ci[1] or not stock_too):
            runs.append((ci[0], row.key, []))
        recipe_id = f"{row.key}@recipe" if runs else row.key
        runs.append((recipe_kind(row), recipe_id, [pytest.mark.slow]))
        for kind, param_id, marks in runs:
            keys = [(kind, True)] + ([(kind, False)] if stock_too else [])
            params.append(
                pytest.param(row, kind, id=param_id, marks=[*marks, pytest.mark.launches(*keys)])
            )
    return params


def _blocked_params() -> list[Any]:
    return [pytest.param(row, id=row.key) for row in ROWS if row.engine is None]


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Future[dict]]:
    """The probe, one run for the module, started in the background."""
    with ThreadPoolExecutor(1) as pool:
        yield pool.submit(
            fidelity_0523.run_probe,
            fidelity_0523.probe_request(),
            tmp_path_factory.mktemp("probe0523"),
        )


@pytest.fixture(scope="module")
def probe(probe_run: Future[dict]) -> dict[tuple[str, str], dict[str, Any]]:
    return probe_run.result()


def _results(probe: dict, row: Row) -> tuple[dict[str, Any], dict[str, Any]]:
    on, off = probe[(row.key, "on")], probe[(row.key, "off")]
    if row.refused is None:
        for result in (on, off):
            assert "error" not in result, result["error"]["traceback"]
    return on, off


def _skip_refused(row: Row) -> None:
    if row.refused is not None:
        pytest.skip(f"sglang 0.5.23 refuses this command: {row.refused} (checked in (a))")


@pytest.mark.parametrize("row", _blocked_params())
def test_rows_without_a_cpu_engine_say_why(row: Row) -> None:
    assert row.engine_blocker, f"row {row.key}: no CPU Engine and no reason given"
    pytest.skip(f"no CPU Engine: {row.engine_blocker}")


def _same_pair(row: Row, kind: str) -> None:
    """The launch read for ``row`` loads the row's own checkpoints (a path-less MTP row's draft
    is the target's checkpoint, which 0.5.23 resolves the missing path to)."""
    spec = KINDS[kind]
    assert spec.target() == row.target()
    draft = spec.draft()
    if row.pathless:
        assert draft in (None, row.target())
    else:
        assert row.draft is not None and draft == row.draft()


def _draft_pools(run: Any) -> list[dict[str, Any]]:
    return [p for p in run.report["kv_pool_buffers"] if p["role"] == "draft" and p.get("parts")]


@pytest.mark.parametrize(("row", "kind"), _engine_params(stock_too=False))
def test_c_draft_price_equals_what_its_pools_allocate(
    engine_runs, probe_run: Future[dict], row: Row, kind: str
) -> None:
    """(The probe of (a)/(b) runs in the background from here on, beside the Engines.)"""
    _same_pair(row, kind)
    run = engine_runs(kind, True)
    memory = run.memory
    assert memory is not None, run.log[-3000:]
    pools = _draft_pools(run)
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
    parts = [part for p in pools for part in p["parts"] if part["token_buffers"]]
    for part in parts:
        assert part["token_buffer_bytes"] % part["token_rows"] == 0, part
    per_row = {
        slot: sum(
            part["token_buffer_bytes"] // part["token_rows"]
            for part in parts
            if _slot_kind(part["size"], tokens, swa_tokens) == slot
        )
        for slot in ("full", "swa", "fixed")
    }
    # Bytes: the K/V buffers of the token-sized pools are what the budget charged per token,
    # those of a fixed-size pool what it charged once.
    per_token_pools = sum(
        part["token_buffer_bytes"]
        for part in parts
        if _slot_kind(part["size"], tokens, swa_tokens) != "fixed"
    )
    fixed = sum(
        part["token_buffer_bytes"]
        for part in parts
        if _slot_kind(part["size"], tokens, swa_tokens) == "fixed"
    )
    assert per_token_pools + fixed > 0
    assert per_token_pools == memory["draft_kv_pool_bytes"]
    assert fixed == memory["draft_fixed_pool_bytes"]
    (swa_size,) = swa_tokens or {0}
    per_token = per_row["full"] + per_row["swa"] * swa_size / tokens
    # The budget's price per token of the target's pool, to the byte it reports.
    assert abs(memory["draft_kv_bytes_per_token"] - per_token) < 1, (per_row, per_token)
    print(f"{row.key}: draft pools {per_token_pools} + {fixed} fixed B, {per_row} B per slot")


def _slot_kind(size: int, tokens: int, swa_tokens: set[int]) -> str:
    if size == tokens:
        return "full"
    return "swa" if size in swa_tokens else "fixed"


@pytest.mark.parametrize(("row", "kind"), _engine_params(stock_too=False))
def test_d_engine_fills_the_budget(engine_runs, row: Row, kind: str) -> None:
    _same_pair(row, kind)
    run = engine_runs(kind, True)
    memory = run.memory
    assert memory is not None, run.log[-3000:]
    fraction = launch_kwargs(kind)["mem_fraction_static"]
    budget = int(fraction * run.pre_load_free_bytes)
    assert memory["budget_bytes"] == budget
    # Weights as SGLang measured them when it profiled, plus every pool's token buffers as
    # allocated (from the tensors), plus the draft's per-request rows (multi-layer EAGLE).
    pools = sum(p.get("token_buffer_bytes", 0) for p in run.report["kv_pool_buffers"])
    used = run.resident_at_profile + pools + memory.get("draft_request_bytes", 0)
    assert 0.995 <= used / budget <= 1, (used, budget)
    print(f"{row.key}: weights + pools {used} of {budget} B ({used / budget:.6f})")


@pytest.mark.parametrize(("row", "kind"), _engine_params(stock_too=False))
def test_d_plan_equals_server(
    engine_runs, row: Row, kind: str, request: pytest.FixtureRequest
) -> None:
    _same_pair(row, kind)
    run = engine_runs(kind, True)
    planned = fidelity_0523.plan_for_server(
        row, launch_kwargs(kind), run.memory, DEFAULT_CAPACITY_BYTES
    )
    # The server came up and plan_for_server held plan to exit 0: a row of the verdict table.
    launch = row.key if kind == row.key else f"{row.key} ({kind})"
    request.node.user_properties.append((VERDICT_PROPERTY, (launch, "starts", "starts")))
    differing = {
        key: (planned[key], run.memory[key])
        for key in PLAN_KEYS
        if planned.get(key) != run.memory.get(key)
    }
    assert differing == {}


def launch_kwargs(kind: str) -> dict[str, Any]:
    """The Engine kwargs :mod:`harness.launch.launch_0_5_23` started ``kind`` with."""
    spec = KINDS[kind]
    return cpu_engine_kwargs(
        spec.target(),
        draft_model_path=spec.draft(),
        algorithm=spec.algorithm,
        **launch_overrides(spec),
    )


@pytest.mark.parametrize(("row", "kind"), _engine_params(stock_too=True))
def test_e_every_tensor_equals_stock_after_init(engine_runs, row: Row, kind: str) -> None:
    _same_pair(row, kind)
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
        if loaded is not None and _equal_but_rows(a, b, loaded):
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
    same = {k: v for k, v in a.items() if k not in ("sha256", "row_sha256")} == {
        k: v for k, v in b.items() if k not in ("sha256", "row_sha256")
    }
    rows_a, rows_b = a.get("row_sha256"), b.get("row_sha256")
    return (
        same
        and rows_a is not None
        and rows_b is not None
        and (rows_a[loaded.start : loaded.stop] == rows_b[loaded.start : loaded.stop])
    )


def _rows_loaded_from_checkpoint(row: Row, name: str) -> range | None:
    """The rows of a fused QKV projection SGLang fills when the draft's checkpoint holds only
    ``q_proj`` for that layer (a frozen-KV MTP assistant reads the target's K/V, so its
    checkpoint has no ``k_proj``/``v_proj``; SGLang's fused ``qkv_proj`` keeps those rows as
    allocated, uninitialized, in stock and plugin-on alike). None for any other tensor."""
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


@pytest.mark.parametrize("row", ROWS, ids=[row.key for row in ROWS])
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
    assert fidelity_0523.server_args_differences(on, off) == {}
    assert fidelity_0523.server_args_differences(on, off, "server_args_input") == {}
    assert on["env_set_by_server_args"] == off["env_set_by_server_args"]
    # What was compared includes what the device decides: the graph batch lists and the
    # fraction (automatic where the recipe gives none) as resolved for the H100 double.
    graphs = off["server_args"]["cuda_graph_config"]
    assert graphs["decode"]["bs"] and graphs["prefill"]["bs"], graphs
    assert 0 < off["server_args"]["mem_fraction_static"] < 1


@pytest.mark.parametrize("row", ROWS, ids=[row.key for row in ROWS])
def test_b_target_config_equal_stock_when_its_pool_is_sized(probe: dict, row: Row) -> None:
    _skip_refused(row)
    on, off = _results(probe, row)
    stock = off["target_before_draft"]
    assert snapshot_differences(on["target_before_draft"], stock) == []
    if "draft" not in off:  # no draft model (NGRAM)
        assert "draft" not in on
        return
    # At pool sizing (both workers built): the target and the scheduler's copy as stock has
    # them, and the draft config built as stock builds it.
    assert snapshot_differences(on["target_after_draft"], off["target_after_draft"]) == []
    assert snapshot_differences(on["scheduler_after_draft"], off["scheduler_after_draft"]) == []
    assert snapshot_differences(on["draft"], off["draft"]) == []
    assert on["draft_model_path_used"] == off["draft_model_path_used"]
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
