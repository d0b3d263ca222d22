"""Multi-layer EAGLE (``MultiLayerEagleWorkerV2``) on the phased init, real SGLang (cpu)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from harness.checkpoints import mimo_v2_mtp
from harness.checkpoints.mimo_v2_mtp import DEFAULT_MIMO_V2, TinyMiMoV2Shape
from harness.geometry import kv_specs
from harness.geometry.specs import attention_kv_spec
from harness.launch.engine import ENGINE_TEST_TIMEOUT_S
from harness.reports.report_reading import (
    F,
    checkpoint_bytes,
    meter_budget,
    profile_reading,
    reading_seqs,
    readings,
    runner,
    runners,
)
from sglang_specinit import budget
from sglang_specinit.sglang_0_5_13 import multi_layer_eagle
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

ALGORITHM = "EAGLE"
NUM_STEPS = 3
SHAPE = DEFAULT_MIMO_V2
MODULE = "sglang.srt.speculative.multi_layer_eagle_worker_v2"

pytestmark = pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S)
engine = pytest.mark.cpu_engine  # the tests that start an Engine


def _start(plugin: bool) -> Callable[[Path], Launch]:
    def start(work_dir: Path) -> Launch:
        target = mimo_v2_mtp.tiny_mimo_v2_target()
        return start_engine(
            target,
            draft=target,  # the MTP layers live in the target's checkpoint
            algorithm=ALGORITHM,
            plugin=plugin,
            work_dir=work_dir,
            num_steps=NUM_STEPS,
            num_draft_tokens=NUM_STEPS + 1,
            trust_remote_code=True,
        )

    return start


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Launch]:
    return launch_cache(tmp_path_factory, {"on": _start(True), "off": _start(False)})


def _attn(layers: int, kv_heads: int, head_dim: int) -> kv_specs.AttentionKVSpec:
    return attention_kv_spec(
        num_layers=layers,
        kv_dtype=SHAPE.dtype,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=head_dim,
    )


def target_spec(shape: TinyMiMoV2Shape, ratio: float) -> kv_specs.HybridSWAKVSpec:
    return kv_specs.HybridSWAKVSpec(
        full=_attn(shape.full_layers, shape.kv_heads, shape.head_dim),
        swa=_attn(shape.swa_layers, shape.swa_kv_heads, shape.swa_head_dim),
        swa_full_tokens_ratio=ratio,
    )


def draft_spec(shape: TinyMiMoV2Shape, ratio: float) -> kv_specs.HybridSWAKVSpec:
    """One MTP runner's pool: a single sliding-window layer, sized (like every draft pool) by
    the TARGET's config, i.e. ``swa_max_total_num_tokens = int(tokens * ratio)``. Expressed
    for the budget model as a hybrid spec whose full part holds zero bytes."""
    return kv_specs.HybridSWAKVSpec(
        full=attention_kv_spec(num_layers=1, kv_dtype=shape.dtype),
        swa=_attn(1, shape.swa_kv_heads, shape.swa_head_dim),
        swa_full_tokens_ratio=ratio,
    )


def hidden_state_row_bytes(shape: TinyMiMoV2Shape) -> int:
    return (NUM_STEPS - 1) * shape.hidden * shape.dtype_bytes


def pool_bytes(run: Launch) -> tuple[int, list[int]]:
    """Bytes of the live target pool and of each draft pool, from the token counts SGLang
    resolved (``memory_pool_config``) and the tiny geometry."""
    target = runner(run.report, "target")
    config = target["memory_pool_config"]
    full, swa = config["full_max_total_num_tokens"], config["swa_max_total_num_tokens"]
    full_cell = SHAPE.full_layers * SHAPE.full_kv_bytes_per_token_per_layer()
    swa_cell = SHAPE.swa_layers * SHAPE.swa_kv_bytes_per_token_per_layer()
    target_bytes = (full + 1) * full_cell + (swa + 1) * swa_cell
    drafts = []
    for draft in runners(run.report, "draft"):
        assert draft["memory_pool_config"] == config
        drafts.append((swa + 1) * SHAPE.swa_kv_bytes_per_token_per_layer())
    return target_bytes, drafts


def mtp_plan(run: Launch, draft_pool: Callable[..., budget.KVSpec]) -> budget.PoolPlan:
    """The independent plan with ``draft_pool(shape, ratio)`` priced once per draft step."""
    ratio = run.report["server_args"]["swa_full_tokens_ratio"]
    return predicted_plan(
        run,
        ALGORITHM,
        target_kv=target_spec(SHAPE, ratio),
        context_len=SHAPE.max_position_embeddings,
        draft_kv_pools=(draft_pool(SHAPE, ratio),) * NUM_STEPS,
        bytes_per_request=hidden_state_row_bytes(SHAPE),
    )


@engine
def test_multi_layer_eagle_comes_up_through_the_four_phases(
    launch: Callable[[str], Launch],
) -> None:
    run = launch("on")
    assert_phased(run, ALGORITHM)
    server_args = run.report["server_args"]
    assert server_args["enable_multi_layer_eagle"] is True  # SGLang's own MiMo-V2 rule
    assert server_args["speculative_num_draft_tokens"] == NUM_STEPS + 1
    assert runner(run.report, "target")["architecture"] == "MiMoV2FlashForCausalLM"


@engine
def test_one_single_layer_pool_per_draft_step(launch: Callable[[str], Launch]) -> None:
    run = launch("on")
    target = runner(run.report, "target")
    drafts = runners(run.report, "draft")
    assert [d["draft_model_idx"] for d in drafts] == list(range(NUM_STEPS))
    assert {d["architecture"] for d in drafts} == {"MiMoV2MTP"}
    pools = [d["kv_pool"] for d in drafts]
    assert len({p["id"] for p in pools} | {target["kv_pool"]["id"]}) == NUM_STEPS + 1
    assert all(p["class"] == "SWAKVPool" and p["layer_num"] == 1 for p in pools)
    assert all(p["size"] == target["kv_pool"]["size"] for p in pools)
    assert {d["req_to_token_pool_id"] for d in drafts} == {target["req_to_token_pool_id"]}
    assert {d["token_to_kv_pool_allocator_id"] for d in drafts} == {
        target["token_to_kv_pool_allocator_id"]
    }


@engine
def test_pool_tokens_equal_the_independent_budget_prediction(
    launch: Callable[[str], Launch],
) -> None:
    run = launch("on")
    report, breakdown = run.report, run.breakdown
    assert breakdown is not None
    assert breakdown["resident_bytes"] == meter_budget(report).resident_bytes
    plan = mtp_plan(run, draft_spec)
    target = runner(report, "target")
    config = target["memory_pool_config"]
    assert plan.tokens > 0
    assert target["kv_pool"]["size"] == config["full_max_total_num_tokens"] == plan.tokens
    assert report["scheduler"]["max_total_num_tokens"] == breakdown["tokens"] == plan.tokens
    ratio = report["server_args"]["swa_full_tokens_ratio"]
    assert config["swa_max_total_num_tokens"] == int(plan.tokens * ratio)
    # What was allocated is what was planned, pool by pool.
    target_bytes, draft_bytes = pool_bytes(run)
    assert target_bytes == plan.target_kv_pool_bytes == breakdown["allocated_target_kv_pool_bytes"]
    assert sum(draft_bytes) == plan.draft_kv_pool_bytes
    assert sum(draft_bytes) == breakdown["allocated_draft_kv_pool_bytes"]
    assert breakdown["draft_kv_pool_bytes"] == breakdown["allocated_draft_kv_pool_bytes"]
    # Priced as an all-SWA model sizing itself (tokens, not tokens * ratio), each MTP pool would
    # be overcharged by 1 / ratio and the pools would come out smaller.
    naive = mtp_plan(
        run,
        lambda shape, r: kv_specs.HybridSWAKVSpec(
            full=_attn(0, shape.kv_heads, shape.head_dim),
            swa=_attn(1, shape.swa_kv_heads, shape.swa_head_dim),
            swa_full_tokens_ratio=r,
        ),
    )
    assert naive.tokens < plan.tokens


@engine
def test_hidden_state_buffer_is_charged(launch: Callable[[str], Launch]) -> None:
    run = launch("on")
    report, breakdown = run.report, run.breakdown
    assert breakdown is not None
    rows = report["scheduler"]["max_running_requests"] + 1  # one per req-to-token row
    expected = rows * hidden_state_row_bytes(SHAPE)
    assert breakdown["draft_request_bytes"] == expected > 0
    # The buffer is allocated right after the last MTP pool, before the backends.
    last_pool = max(reading_seqs(report, "ModelRunnerKVCacheMixin.init_memory_pool", True))
    after = readings(report)[last_pool + 1]
    assert after["used_bytes"] - readings(report)[last_pool]["used_bytes"] >= expected


@engine
def test_weights_pools_and_hidden_states_fill_the_budget(
    launch: Callable[[str], Launch],
) -> None:
    run = launch("on")
    report, breakdown = run.report, run.breakdown
    assert breakdown is not None
    meter = meter_budget(report)
    target_bytes, draft_bytes = pool_bytes(run)
    used = meter.resident_bytes + target_bytes + sum(draft_bytes) + breakdown["draft_request_bytes"]
    limit = F * CAPACITY
    assert used <= meter.budget_bytes <= limit
    assert used >= 0.995 * limit
    ratio = report["server_args"]["swa_full_tokens_ratio"]
    per_token = (
        target_spec(SHAPE, ratio).bytes_per_token()
        + NUM_STEPS * draft_spec(SHAPE, ratio).bytes_per_token()
    )
    assert meter.budget_bytes - used < per_token + NUM_STEPS  # + per-pool int() truncation
    assert report["meter"]["used_bytes"] >= used


@engine
def test_draft_layers_are_charged_and_shared_embed_head_freed_first(
    launch: Callable[[str], Launch],
) -> None:
    run = launch("on")
    report, breakdown = run.report, run.breakdown
    assert breakdown is not None
    target_path = mimo_v2_mtp.tiny_mimo_v2_target()
    mtp = checkpoint_bytes(target_path, lambda n: n.startswith("model.mtp.layers."))
    # The MTP layers' own weights, all steps; the embedding and head are the target's.
    assert breakdown["draft_weight_bytes"] == mtp > 0
    embed_and_head = 2 * SHAPE.vocab * SHAPE.hidden * SHAPE.dtype_bytes
    peak = max(readings(report)[s]["used_bytes"] for s in reading_seqs(report, "load_model", True))
    profile = profile_reading(report)["used_bytes"]
    # Each MTP runner loaded its own embedding and head; all were freed before the profiling.
    assert peak - profile >= NUM_STEPS * embed_and_head - NUM_STEPS * 1024
    assert meter_budget(report).resident_bytes < (
        runner(report, "target")["weight_bytes"] + mtp + 64 * 1024
    )


@engine
@pytest.mark.slow  # the stock contrast; CI keeps EAGLE3's (test_phased_eagle)
def test_plugin_off_reproduces_the_overshoot(launch: Callable[[str], Launch]) -> None:
    on, off = launch("on"), launch("off")
    assert_stock(off, ALGORITHM)
    assert len(runners(off.report, "draft")) == NUM_STEPS
    target_bytes, draft_bytes = pool_bytes(off)
    weights = runner(off.report, "target")["weight_bytes"] + checkpoint_bytes(
        mimo_v2_mtp.tiny_mimo_v2_target(), lambda n: n.startswith("model.mtp.layers.")
    )
    assert weights + target_bytes + sum(draft_bytes) > MIN_STOCK_OVERSHOOT * F * CAPACITY
    assert (
        runner(off.report, "target")["kv_pool"]["size"]
        > runner(on.report, "target")["kv_pool"]["size"]
    )


def test_all_swa_draft_pool_is_priced_at_the_target_split() -> None:
    ratio = 0.8
    target = target_spec(SHAPE, ratio)
    own = kv_specs.HybridSWAKVSpec(
        full=_attn(0, SHAPE.kv_heads, SHAPE.head_dim),
        swa=_attn(1, SHAPE.swa_kv_heads, SHAPE.swa_head_dim),
        swa_full_tokens_ratio=ratio,
    )
    priced = kv_specs.sized_by_target(own, target)
    tokens = 1000
    swa_cell = SHAPE.swa_kv_bytes_per_token_per_layer()
    assert budget.kv_pool_bytes(priced, tokens, 1) == (int(tokens * ratio) + 1) * swa_cell
    assert priced.bytes_per_token() == pytest.approx(ratio * swa_cell)
    assert priced.padding_bytes(1) == swa_cell
    # Unchanged when the target has no full layers (its own split is all-SWA too) or is not
    # hybrid, and for drafts with full layers.
    all_swa_target = kv_specs.HybridSWAKVSpec(
        full=_attn(0, 2, 16), swa=own.swa, swa_full_tokens_ratio=ratio
    )
    assert kv_specs.sized_by_target(own, all_swa_target) is own
    assert kv_specs.sized_by_target(own, _attn(2, 2, 16)) is own
    assert kv_specs.sized_by_target(target, target) is target


def test_constructor_cut_point_is_where_the_phases_expect_it() -> None:
    calls = init_call_order(MODULE, "MultiLayerEagleDraftWorker")
    first = {name: calls.index(name) for name in calls}
    assert "draft_worker=" in first and "init_lm_head" in first, calls
    assert (
        first["draft_worker="]
        < first["init_lm_head"]
        < first["req_to_hidden_states_pool="]
        < first["init_attention_backend"]
        < first["init_cuda_graphs"]
    ), calls
    # Nothing between the cut and the backends that the pool phase does not redo.
    between = calls[first["init_lm_head"] + 1 : first["init_attention_backend"]]
    assert set(between) <= {
        "req_to_hidden_states_pool=",
        "draft_tp_context=",
        "draft_tp_context",
    }, between


def test_phase_methods_are_new_on_the_real_classes() -> None:
    for method in multi_layer_eagle.NEW_METHODS:
        assert method.module == MODULE
        assert method.name not in class_defines(method.module, method.class_name), method
    draft = class_defines(MODULE, "MultiLayerEagleDraftWorker")
    assert {"init_lm_head", "init_attention_backend", "init_cuda_graphs"} <= draft
