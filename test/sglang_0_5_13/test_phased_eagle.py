"""The phased EAGLE/EAGLE3 init on real SGLang 0.5.13.post1 classes (device cpu)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import test_cross_check as cross_check
from harness.checkpoints import eagle_drafts, llama_layout
from harness.checkpoints.eagle_drafts import own_lm_head_problems
from harness.checkpoints.llama_family import DEFAULT_TARGET
from harness.checkpoints.llama_layout import TinyLlamaShape
from harness.cpu_doubles import shims
from harness.launch import forward_hooks
from harness.launch.engine import ENGINE_TEST_TIMEOUT_S, cpu_engine, cpu_server
from harness.reports import device_probe
from harness.reports.report_reading import (
    PHASES,
    REPORT_DIR_ENV,
    F,
    checkpoint_bytes,
    kv_buffer_bytes,
    kv_spec,
    meter_budget,
    profile_reading,
    read_breakdown,
    reading_seqs,
    readings,
    runner,
    torch_distributed_readings,
)
from test_plugin_loading import HOOK_TARGETS
from test_workers_common import (
    CAPACITY,
    Draft,
    Launch,
    assert_draft_pools_as_planned,
    llama_draft,
    plugin_launches,
)

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S)]

MEMORY_PREFIX = "SPECINIT_MEMORY "
EAGLE3_DRAFT_VOCAB = DEFAULT_TARGET.vocab // 2  # a reduced draft vocabulary: a hot-token map
# --forward-hooks patterns that match modules of both the target and the EAGLE3 draft.
HOOKED_MODULES = ["lm_head", "model.layers.*.mlp"]


def _eagle(
    algorithm: str,
    shape: TinyLlamaShape,
    make: Callable[[], Path],
    shared: tuple[str, ...],
    **flags: Any,
) -> Draft:
    """``shared``: tensors bound to the target's (freed before sizing); ``flags``: Engine flags."""
    arch = f"LlamaForCausalLM{algorithm.title()}"
    more = {"shared": shared, "draft_cell": shape.kv_bytes_per_token(), "probed": True}
    return llama_draft(algorithm, shape, make, arch, {}, flags, **more)


CASES = {
    "EAGLE": _eagle(
        "EAGLE",
        eagle_drafts.DEFAULT_EAGLE_DRAFT,
        eagle_drafts.tiny_eagle_draft,
        ("embed_tokens", "lm_head"),
    ),
    # Its own KV geometry (1 KV head of dim 48) and a hot-token map; phase 4 keeps two stock
    # steps (the adaptive controller's states, --forward-hooks) that change no pool.
    "EAGLE3": _eagle(
        "EAGLE3",
        eagle_drafts.DEFAULT_EAGLE3_DRAFT,
        lambda: eagle_drafts.tiny_eagle3_draft(draft_vocab=EAGLE3_DRAFT_VOCAB),
        ("embed_tokens",),
        speculative_adaptive=True,
        forward_hooks=forward_hooks.hook_specs(HOOKED_MODULES),
    ),
    "EAGLE3-nnpl0": _eagle(
        "EAGLE3",
        eagle_drafts.DEFAULT_EAGLE3_DRAFT,
        lambda: eagle_drafts.tiny_eagle3_draft(num_nextn_predict_layers=0),
        ("embed_tokens",),
    ),
}


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, bool], Launch]:
    """``launch(case, plugin)``: the (cached) result of one Engine launch."""
    return plugin_launches(tmp_path_factory, CASES)


# nnpl-0: EAGLE3's launch with a key 0.5.13 does not price (0.5.23's suite does): slow set only.
CASE_IDS = [
    pytest.param(case, marks=pytest.mark.slow) if case == "EAGLE3-nnpl0" else case
    for case in sorted(CASES)
]
# Stock contrasts: EAGLE3 in CI, EAGLE (the same overshoot, a smaller draft) with the slow set.
STOCK_CASES = ["EAGLE3", pytest.param("EAGLE", marks=pytest.mark.slow)]


@pytest.mark.parametrize("case", CASE_IDS)
def test_phased_launch_runs_in_order_frees_shared_copies_and_fills_the_budget(
    launch: Callable[[str, bool], Launch], case: str
) -> None:
    run = launch(case, True)
    # Pools equal the independent prediction and fill the budget (runs assert_phased).
    breakdown = assert_draft_pools_as_planned(run, CASES[case])
    report = run.report

    # Meter (beyond assert_phased's draft loads < profiling < target pool): the target loads
    # first, and one pool each, the target's first.
    target_loads = reading_seqs(report, "ModelRunner.load_model", False)
    draft_loads = reading_seqs(report, "ModelRunner.load_model", True)
    (target_pool,) = reading_seqs(report, "ModelRunnerKVCacheMixin.init_memory_pool", False)
    (draft_pool,) = reading_seqs(report, "ModelRunnerKVCacheMixin.init_memory_pool", True)
    assert target_loads and max(target_loads) < min(draft_loads)
    assert max(draft_loads) < target_pool < draft_pool

    # Log: the same order, as SGLang and the plugin logged it.
    target_arch = runner(report, "target")["architecture"]
    draft_arch = runner(report, "draft")["architecture"]
    log = run.log
    done = [f"[specinit] phase {phase} done" for phase in PHASES]
    needles = [f"type={target_arch},", done[0], f"type={draft_arch},", done[1]]
    needles += ["KV Cache is allocated", done[2], done[3], MEMORY_PREFIX]
    marks = [log.find(needle) for needle in needles]
    assert -1 not in marks and marks == sorted(marks), list(zip(needles, marks, strict=True))
    # The draft's layer count, read from its config before any weights loaded (upstream's
    # eagle_draft_num_layers), is in the phase-1 line and is what the draft pool holds
    # (assert_draft_pools_as_planned): no phase-3 warning.
    draft_layers = runner(report, "draft")["kv_pool"]["layer_num"]
    (phase1,) = [ln for ln in log.splitlines() if f"[specinit] phase {PHASES[0]} done" in ln]
    assert f"(eagle_draft_num_layers={draft_layers}, from the draft config" in phase1
    assert "[specinit] the draft runners allocate" not in log
    # The scheduler patched its own worker's module, and no other algorithm's (it never
    # imported them: the plugin patches a module only once SGLang imports it).
    speculative = {t.split(".")[3] for t in report["applied_hook_targets"] if ".speculative." in t}
    assert speculative == {"eagle_worker_v2"}, report["applied_hook_targets"]

    # Draft copies of shared weights are freed before the target pool is sized.
    shape = CASES[case].shape
    embedding_bytes = shape.vocab * shape.hidden * shape.dtype_bytes
    draft_runner = runner(report, "draft")
    target_weights = runner(report, "target")["weight_bytes"]
    own = checkpoint_bytes(CASES[case].checkpoint(), CASES[case].own_tensor)
    # The live draft model still references the target's embedding; it is not charged.
    assert breakdown["draft_weight_bytes"] + embedding_bytes <= draft_runner["weight_bytes"]
    assert breakdown["draft_weight_bytes"] < own + embedding_bytes // 8
    # The meter at the target's profiling holds the target, the draft's own tensors and a few
    # small buffers, but not the draft's embedding copy ...
    resident = meter_budget(report).resident_bytes
    assert resident < target_weights + own + embedding_bytes // 8, (resident, target_weights, own)
    # ... which was there right after the draft loaded.
    peak = max(readings(report)[s]["used_bytes"] for s in reading_seqs(report, "load_model", True))
    assert peak - profile_reading(report)["used_bytes"] > embedding_bytes // 2


def assert_stock_sglang(report: dict[str, Any], log: str) -> None:
    """The harness on stock SGLang (plugin disabled): its shims applied, the meter read where
    SGLang reads free memory, every checkpoint tensor loaded by name."""
    assert report["sglang_plugins_env"] == "none-specinit-disabled"
    assert not report["specinit_loaded"]
    assert {t for t, _, _ in shims.shim_hooks()} <= set(report["applied_hook_targets"])
    # The meter replaced the stale `from ... import get_available_gpu_memory` bindings too.
    callers = {r["caller"].rsplit(".", 2)[0] for r in readings(report)}
    assert {
        "sglang.srt.model_executor.model_runner",
        "sglang.srt.model_executor.model_runner_kv_cache_mixin",
        "sglang.srt.managers.scheduler",
    } <= callers, callers
    # SGLang's Llama loader warns for checkpoint names it has no parameter for.
    assert "not found in params_dict" not in log


# Tensors of the EAGLE3 draft that must be stock's after init: its hot-token map (on the model
# and on the worker), its own trained head and the embedding it shares with the target.
EAGLE3_DRAFT_TENSORS = (
    "worker/hot_token_id",
    "draft0/hot_token_id",
    "draft0/lm_head.weight",
    "draft0/model.embed_tokens.weight",
)


@pytest.mark.parametrize(
    "case", [*STOCK_CASES, pytest.param("EAGLE3-nnpl0", marks=pytest.mark.slow)]
)
@pytest.mark.timeout(2 * ENGINE_TEST_TIMEOUT_S)  # starts two launches when run on its own
def test_stock_init_overshoots_the_budget(launch: Callable[[str, bool], Launch], case: str) -> None:
    """The bug: 0.5.13.post1 sizes the target pool for the whole budget, then adds the draft.
    First the baseline the phased tests build on: if that fails, the harness is broken."""
    stock, phased = launch(case, False), launch(case, True)
    report, info = stock.report, stock.info
    assert_stock_sglang(report, stock.log)
    assert stock.breakdown is None
    algorithm = CASES[case].algorithm
    assert report["scheduler"]["spec_algorithm"] == info["speculative_algorithm"] == algorithm
    # The Engine side (handshake) and the scheduler side agree.
    assert info["max_total_num_tokens"] == report["scheduler"]["max_total_num_tokens"]
    target, draft = runner(report, "target"), runner(report, "draft")
    tpool, dpool = target["kv_pool"], draft["kv_pool"]
    assert tpool["storage_bytes"] > 0 and dpool["storage_bytes"] > 0
    assert tpool["size"] == dpool["size"] == report["scheduler"]["max_total_num_tokens"]
    # The draft shares the target's request table and allocator, but owns its KV buffers.
    assert draft["req_to_token_pool_id"] == target["req_to_token_pool_id"]
    assert draft["token_to_kv_pool_allocator_id"] == target["token_to_kv_pool_allocator_id"]
    assert tpool["id"] != dpool["id"]
    # Meter usage at the target's pre-model-load measurement (in init_torch_distributed).
    pre_load = torch_distributed_readings(report)[0]["used_bytes"]
    assert report["meter"]["used_bytes"] > pre_load
    assert report["meter"]["used_bytes"] >= tpool["storage_bytes"] + dpool["storage_bytes"]
    shape = CASES[case].shape
    geometry = (shape.layers, shape.kv_heads, shape.head_dim)
    assert (dpool["layer_num"], dpool["head_num"], dpool["head_dim"]) == geometry
    target_geometry = (DEFAULT_TARGET.kv_heads, DEFAULT_TARGET.head_dim)
    assert ((dpool["head_num"], dpool["head_dim"]) == (tpool["head_num"], tpool["head_dim"])) is (
        (shape.kv_heads, shape.head_dim) == target_geometry
    )
    for pool_shape, pool in ((shape, dpool), (DEFAULT_TARGET, tpool)):  # slot 0 is padding
        rows = pool["size"] + pool["page_size"]
        assert pool["k_bytes"] == rows * pool_shape.kv_bytes_per_token() // 2

    # Stock profiles before any draft reading: the draft is not in the sizing at all.
    (profile,) = reading_seqs(report, "ModelRunnerKVCacheMixin._profile_available_bytes", False)
    assert profile < min(reading_seqs(report, "load_model", True))
    meter = meter_budget(report)
    # Only the target's weights were resident at profiling; the draft's come on top, so this
    # sum is a lower bound of what stock holds.
    assert meter.resident_bytes + kv_buffer_bytes(tpool) + kv_buffer_bytes(dpool) > F * CAPACITY
    # The target pool alone takes the whole budget: what f x free leaves after the target's
    # weights, over the target's cell.
    budget_left = int(F * meter.pre_load_free_bytes) - meter.resident_bytes
    assert tpool["size"] == budget_left // kv_spec(DEFAULT_TARGET).bytes_per_token()
    # With the plugin the same launch gets fewer tokens: the draft is paid for.
    assert runner(phased.report, "target")["kv_pool"]["size"] < tpool["size"]

    # The device probe finds stock over the budget and the plugin within it.
    assert phased.probe is not None and stock.probe is not None
    (on_records,), (off_records,) = phased.probe, stock.probe  # one scheduler process each
    on, off = (device_probe.usage_after_pools(r) for r in (on_records, off_records))
    # Same pre-load reading, same budget: the two launches differ only after loading.
    assert on.budget_bytes == off.budget_bytes == int(F * on.pre_load_free_bytes)
    assert on.over_budget_bytes <= device_probe.BOOKKEEPING_TOLERANCE_BYTES, on.describe()
    assert on.counted_bytes >= 0.98 * on.budget_bytes, on.describe()
    assert off.over_budget_bytes > device_probe.BOOKKEEPING_TOLERANCE_BYTES, off.describe()
    # What the probe counts for the phased launch is the plugin's own account of it: weights
    # measured at sizing plus the pools SGLang allocated.
    breakdown = phased.breakdown
    assert breakdown is not None
    # The probe and the plugin start from the same SGLang reading (as the GPU suite asserts).
    assert on.pre_load_free_bytes == breakdown["pre_load_free_bytes"]
    assert on.budget_bytes == breakdown["budget_bytes"]
    assert off.draft_kv_bytes > 0 and on.draft_kv_bytes > 0
    assert off.over_budget_bytes >= off.draft_kv_bytes - device_probe.BOOKKEEPING_TOLERANCE_BYTES
    allocated = (
        breakdown["allocated_target_kv_pool_bytes"] + breakdown["allocated_draft_kv_pool_bytes"]
    )
    own_account = breakdown["resident_bytes"] + allocated
    assert abs(on.counted_bytes - own_account) <= device_probe.BOOKKEEPING_TOLERANCE_BYTES
    assert on.kv_bytes == allocated
    # EAGLE3's draft state (hot-token map, own head, adaptive steps, --forward-hooks) survives
    # every phase as stock builds it.
    if case == "EAGLE3":
        hooked, steps = [], []
        for launched in (phased.report, report):
            assert launched["draft"]["hot_token_id_len"] == EAGLE3_DRAFT_VOCAB
            assert own_lm_head_problems(launched) == []
            steps.append(launched["draft"]["adaptive_state_steps"])
            assert steps[-1] is not None and len(steps[-1]) > 1, steps
            hooked.append(
                {r["role"]: r["forward_hooked_modules"] for r in launched["model_runners"]}
            )
            assert hooked[-1]["target"] and hooked[-1]["draft"], hooked
        assert hooked[0] == hooked[1] and steps[0] == steps[1]
        on_tensors, off_tensors = phased.report["tensors"], report["tensors"]
        for name in EAGLE3_DRAFT_TENSORS:
            on_t, off_t = on_tensors[name], off_tensors[name]
            assert (on_t["sha256"], on_t["owner"]) == (off_t["sha256"], off_t["owner"]), name


# Below the context length (2,048): the pool, not the context, bounds one request.
CAPPED_TOKENS = DEFAULT_TARGET.max_position_embeddings // 2


def test_launch_server_reports_the_budgeted_token_count(tiny_target: Path, tmp_path: Path) -> None:
    specinit_dir = tmp_path / "specinit"
    specinit_dir.mkdir()
    with cpu_server(
        tiny_target,
        draft_model_path=eagle_drafts.tiny_eagle_draft(),
        algorithm="EAGLE",
        plugin=True,
        work_dir=tmp_path,
        extra_env={REPORT_DIR_ENV: str(specinit_dir)},
        max_total_tokens=CAPPED_TOKENS,
    ) as server:
        info = server.server_info()
        report = server.scheduler_report()
        proc = server.proc
    breakdown = read_breakdown(specinit_dir)
    assert breakdown is not None and report["specinit_loaded"]
    assert info["speculative_algorithm"] == "EAGLE"
    assert info["max_total_num_tokens"] == breakdown["tokens"] > 0
    assert info["max_total_num_tokens"] == report["scheduler"]["max_total_num_tokens"]
    assert sorted(r["role"] for r in report["model_runners"]) == ["draft", "target"]
    assert runner(report, "draft")["kv_pool"]["size"] == breakdown["tokens"]
    assert breakdown["tokens"] == CAPPED_TOKENS
    scheduler = report["scheduler"]
    assert scheduler["max_req_len"] == CAPPED_TOKENS - 1
    assert CAPPED_TOKENS < DEFAULT_TARGET.max_position_embeddings
    assert scheduler["max_req_input_len"] == scheduler["max_req_len"] - 5
    # The harness's launch_server helper tore the server's process group down on exit.
    assert proc.poll() is not None


PROMPTS = [llama_layout.prompt_text(5), llama_layout.prompt_text(9, start=300), "w7 w8 w9"]


def test_plain_engine_is_unchanged_by_the_plugin(tiny_target: Path, tmp_path: Path) -> None:
    def run(plugin: bool) -> tuple[list[Any], dict[str, Any], dict[str, Any] | None, str]:
        specinit_dir = tmp_path / f"{plugin}" / "specinit"
        specinit_dir.mkdir(parents=True)
        with cpu_engine(
            tiny_target,
            plugin=plugin,
            capacity_bytes=cross_check.CAPACITY,
            work_dir=specinit_dir.parent,
            mem_fraction_static=cross_check.FRACTION,
            extra_env={REPORT_DIR_ENV: str(specinit_dir)},
        ) as engine:
            tokens = [o["output_ids"] for o in engine.generate(PROMPTS, max_new_tokens=6)]
            again = [o["output_ids"] for o in engine.generate(PROMPTS, max_new_tokens=6)]
            report = engine.scheduler_report()
        assert again == tokens  # greedy is deterministic
        assert report["pid"] != engine.proc.pid  # written by the spawned scheduler process
        log = engine.log_path.read_text(errors="replace")
        return tokens, report, read_breakdown(specinit_dir), log

    (off_tokens, off, _, off_log), (on_tokens, on, on_breakdown, on_log) = run(False), run(True)
    assert_stock_sglang(off, off_log)
    cross_check.assert_sizing_matches_sglang(off, tiny_target, DEFAULT_TARGET, {})  # GQA, in CI
    scheduler = off["scheduler"]
    assert scheduler["spec_algorithm"] == "NONE"
    assert off["model_runners"][0]["kv_pool"]["size"] == scheduler["max_total_num_tokens"] > 0
    assert on["specinit_loaded"] and not off["specinit_loaded"]
    # The scheduler loaded the plugin through its entry point and applied its hooks; a launch
    # without a draft never imports a speculative worker, so none is patched there.
    assert on["sglang_plugins_env"] == "specinit"
    applied = set(on["applied_hook_targets"])
    targets = {t for t in HOOK_TARGETS if ".speculative." not in t and ".arg_groups." not in t}
    assert targets <= applied
    assert not {t for t in HOOK_TARGETS if ".speculative." in t} & applied
    assert on_breakdown is None  # nothing to phase without a draft
    assert "[specinit] phase" not in on_log
    assert on["scheduler"] == off["scheduler"]
    (on_runner,), (off_runner,) = on["model_runners"], off["model_runners"]
    for key in ("size", "layer_num", "head_num", "head_dim", "k_bytes", "v_bytes"):
        assert on_runner["kv_pool"][key] == off_runner["kv_pool"][key], key
    assert all(len(t) == 6 for t in on_tokens)
    assert on_tokens == off_tokens
