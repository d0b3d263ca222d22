"""FROZEN_KV_MTP (``FrozenKVMTPWorker``) on the phased init, real SGLang 0.5.13.post1 (cpu)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from harness.checkpoints import gemma4_mtp
from harness.checkpoints.gemma4_mtp import DEFAULT_GEMMA4_ASSISTANT, DEFAULT_GEMMA4_TARGET
from harness.geometry import kv_specs
from harness.geometry.specs import FROZEN_KV_STAND_IN_TOKENS, attention_kv_spec
from harness.launch.engine import ENGINE_TEST_TIMEOUT_S
from harness.reports.report_reading import (
    F,
    checkpoint_bytes,
    kv_buffer_bytes,
    meter_budget,
    runner,
)
from sglang_specinit.sglang_0_5_13 import frozen_kv_mtp
from test_workers_common import (
    CAPACITY,
    MIN_STOCK_OVERSHOOT,
    Launch,
    assert_phased,
    assert_stock,
    class_defines,
    init_call_order,
    launch_cache,
    predicted_plan,
    start_engine,
)

pytestmark = pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S)
engine = pytest.mark.cpu_engine  # the tests that start an Engine

ALGORITHM = "FROZEN_KV_MTP"
MODULE = "sglang.srt.speculative.frozen_kv_mtp_worker"
TARGET = DEFAULT_GEMMA4_TARGET
ASSISTANT = DEFAULT_GEMMA4_ASSISTANT


def _start(plugin: bool) -> Callable[[Path], Launch]:
    return lambda work_dir: start_engine(
        gemma4_mtp.tiny_gemma4_target(),
        draft=gemma4_mtp.tiny_gemma4_assistant(),
        algorithm="EAGLE",  # promoted to FROZEN_KV_MTP by SGLang for a Gemma 4 assistant
        plugin=plugin,
        work_dir=work_dir,
        attention_backend="triton",
    )


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Launch]:
    return launch_cache(tmp_path_factory, {"on": _start(True), "off": _start(False)})


def _attn(layers: int) -> kv_specs.AttentionKVSpec:
    return attention_kv_spec(
        num_layers=layers,
        kv_dtype=TARGET.dtype,
        num_kv_heads=TARGET.kv_heads,
        head_dim=TARGET.head_dim,
        v_head_dim=TARGET.head_dim,
    )


def target_spec(ratio: float) -> kv_specs.HybridSWAKVSpec:
    return kv_specs.HybridSWAKVSpec(
        full=_attn(TARGET.layer_types.count("full_attention")),
        swa=_attn(TARGET.layer_types.count("sliding_attention")),
        swa_full_tokens_ratio=ratio,
    )


def stand_in_pool_bytes() -> int:
    """The assistant's own pool: 64 tokens (+1 padding) over its layers, at its geometry."""
    tokens = FROZEN_KV_STAND_IN_TOKENS
    return (tokens + 1) * ASSISTANT.layers * ASSISTANT.kv_bytes_per_token_per_layer()


def target_pool_bytes(run: Launch) -> int:
    """The target ``SWAKVPool``'s bytes, from the token split SGLang resolved (the harness's
    ``storage_bytes`` does not see an SWAKVPool's sub-pools)."""
    config = runner(run.report, "target")["memory_pool_config"]
    full, swa = config["full_max_total_num_tokens"], config["swa_max_total_num_tokens"]
    ratio = run.report["server_args"]["swa_full_tokens_ratio"]
    spec = target_spec(ratio)
    assert swa == int(full * ratio)
    return (full + 1) * spec.full.bytes_per_token() + (swa + 1) * spec.swa.bytes_per_token()


@engine
def test_frozen_kv_mtp_comes_up_through_the_four_phases(
    launch: Callable[[str], Launch],
) -> None:
    run = launch("on")
    assert_phased(run, ALGORITHM)  # the EAGLE alias was resolved by SGLang
    assert run.report["server_args"]["disable_overlap_schedule"] is True
    target, draft = runner(run.report, "target"), runner(run.report, "draft")
    assert (target["architecture"], draft["architecture"]) == (
        "Gemma4ForCausalLM",
        "Gemma4AssistantForCausalLM",
    )
    # Attached to the target's request table and allocator in the pool phase.
    assert draft["req_to_token_pool_id"] == target["req_to_token_pool_id"]
    assert draft["token_to_kv_pool_allocator_id"] == target["token_to_kv_pool_allocator_id"]


@engine
def test_no_draft_kv_is_reserved_only_the_stand_in_pool(launch: Callable[[str], Launch]) -> None:
    run = launch("on")
    breakdown = run.breakdown
    assert breakdown is not None
    dpool = runner(run.report, "draft")["kv_pool"]
    assert dpool["size"] == FROZEN_KV_STAND_IN_TOKENS
    assert kv_buffer_bytes(dpool) == stand_in_pool_bytes() == 16640
    assert breakdown["draft_kv_bytes_per_token"] == 0
    assert breakdown["draft_kv_pool_bytes"] == 0
    assert breakdown["priced_kv_bytes_per_token"] == breakdown["target_kv_bytes_per_token"]
    assert breakdown["allocated_draft_kv_pool_bytes"] == stand_in_pool_bytes()
    # ... which the plan still charged (used = resident + target pool + stand-in pool).
    assert breakdown["used_bytes"] == (
        breakdown["resident_bytes"] + breakdown["target_kv_pool_bytes"] + stand_in_pool_bytes()
    )


@engine
def test_pool_tokens_equal_the_independent_budget_prediction(
    launch: Callable[[str], Launch],
) -> None:
    run = launch("on")
    report, breakdown = run.report, run.breakdown
    assert breakdown is not None
    assert breakdown["resident_bytes"] == meter_budget(report).resident_bytes
    plan = predicted_plan(
        run,
        ALGORITHM,
        target_kv=target_spec(report["server_args"]["swa_full_tokens_ratio"]),
        context_len=TARGET.max_position_embeddings,
        draft_kv_pools=(),  # it reads the target's KV
        fixed_bytes=stand_in_pool_bytes(),
    )
    target = runner(report, "target")
    assert plan.tokens > 0
    assert target["kv_pool"]["size"] == plan.tokens == breakdown["tokens"]
    assert report["scheduler"]["max_total_num_tokens"] == plan.tokens
    assert target_pool_bytes(run) == plan.target_kv_pool_bytes
    assert target_pool_bytes(run) == breakdown["allocated_target_kv_pool_bytes"]


@engine
def test_weights_and_kv_fill_the_budget_without_exceeding_it(
    launch: Callable[[str], Launch],
) -> None:
    run = launch("on")
    report = run.report
    meter = meter_budget(report)
    used = meter.resident_bytes + target_pool_bytes(run) + stand_in_pool_bytes()
    limit = F * CAPACITY
    assert used <= meter.budget_bytes <= limit
    assert used >= 0.995 * limit
    per_token = target_spec(report["server_args"]["swa_full_tokens_ratio"]).bytes_per_token()
    assert meter.budget_bytes - used < per_token + 1
    assert report["meter"]["used_bytes"] >= used


@engine
def test_assistant_weights_are_counted(launch: Callable[[str], Launch]) -> None:
    run = launch("on")
    report, breakdown = run.report, run.breakdown
    assert breakdown is not None
    # The assistant's own weights (its tied embedding/head included); the target embedding it
    # binds is the target's tensor and is not counted twice.
    own = checkpoint_bytes(gemma4_mtp.tiny_gemma4_assistant())
    embedding = TARGET.vocab * TARGET.hidden * TARGET.dtype_bytes
    assert own <= breakdown["draft_weight_bytes"] < own + embedding // 8
    assert runner(report, "draft")["weight_bytes"] >= breakdown["draft_weight_bytes"] + embedding
    assert meter_budget(report).resident_bytes >= (
        breakdown["target_weight_bytes"] + breakdown["draft_weight_bytes"]
    )


@engine
@pytest.mark.slow  # the stock contrast; CI keeps EAGLE3's (test_phased_eagle)
def test_plugin_off_leaves_the_assistant_outside_the_budget(
    launch: Callable[[str], Launch],
) -> None:
    on, off = launch("on"), launch("off")
    assert_stock(off, ALGORITHM)
    target, draft = runner(off.report, "target"), runner(off.report, "draft")
    stock = meter_budget(off.report)
    # Stock sized the target pool before the assistant existed ...
    assert stock.resident_bytes < target["weight_bytes"] + 64 * 1024
    # ... so the assistant's weights and stand-in pool land on top of f x capacity.
    own = checkpoint_bytes(gemma4_mtp.tiny_gemma4_assistant())
    pools = target_pool_bytes(off) + kv_buffer_bytes(draft["kv_pool"])
    total = target["weight_bytes"] + own + pools
    assert total > MIN_STOCK_OVERSHOOT * F * CAPACITY
    assert target["kv_pool"]["size"] > runner(on.report, "target")["kv_pool"]["size"]


def test_constructor_cut_points_follow_the_draft_load() -> None:
    calls = init_call_order(MODULE, "FrozenKVMTPWorker")
    first = {name: calls.index(name) for name in calls}
    assert (
        first["super"]
        < first["_bind_kv_context"]
        < first["_init_draft_attn_backend"]
        < first["init_cuda_graphs"]
    ), calls
    assert {"_bind_kv_context", "_init_draft_attn_backend", "init_cuda_graphs"} <= (
        class_defines(MODULE, "FrozenKVMTPWorker")
    )
    for method in frozen_kv_mtp.NEW_METHODS:
        assert method.name not in class_defines(method.module, method.class_name), method


def test_runtime_description_of_a_frozen_worker_has_no_pool_runners() -> None:
    from sglang.srt.speculative.frozen_kv_mtp_worker import FrozenKVMTPWorker
    from sglang_specinit.sglang_0_5_13.scheduler import describe_draft

    worker = FrozenKVMTPWorker.__new__(FrozenKVMTPWorker)
    draft_runner = object()
    worker.model_runner_list = [draft_runner]
    described = describe_draft(worker)
    assert described.pool_runners == []
    assert described.weight_runners == [draft_runner]
    assert described.fixed_pools == [(draft_runner, FROZEN_KV_STAND_IN_TOKENS)]
    assert described.bytes_per_request == 0
