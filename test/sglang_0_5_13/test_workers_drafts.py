"""Drafts with a KV geometry of their own, phased on real SGLang 0.5.13.post1 (cpu): STANDALONE
and DFLASH of the tiny Llama, FROZEN_KV_MTP (a Gemma 4 assistant) and multi-layer EAGLE (MiMo-V2
MTP, one pool per step) of hybrid SWA targets. One table, one set of checks; then each worker's."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from harness.checkpoints import eagle_drafts, gemma4_mtp, llama_family, mimo_v2_mtp
from harness.checkpoints.eagle_drafts import DEFAULT_DFLASH_DRAFT, DFLASH_BLOCK_SIZE
from harness.checkpoints.gemma4_mtp import DEFAULT_GEMMA4_ASSISTANT, DEFAULT_GEMMA4_TARGET
from harness.checkpoints.llama_family import DEFAULT_STANDALONE_DRAFT, DEFAULT_TARGET
from harness.checkpoints.mimo_v2_mtp import DEFAULT_MIMO_V2
from harness.geometry import kv_specs
from harness.geometry.kv_specs import HybridSWAKVSpec
from harness.geometry.specs import FROZEN_KV_STAND_IN_TOKENS, attention_kv_spec
from harness.launch.engine import ENGINE_TEST_TIMEOUT_S
from harness.reports.report_reading import (
    F,
    checkpoint_bytes,
    kv_buffer_bytes,
    meter_budget,
    profile_reading,
    reading_seqs,
    readings,
    runner,
    runners,
)
from sglang_specinit import budget
from sglang_specinit.sglang_0_5_13 import draft_workers
from test_workers_common import (
    CAPACITY,
    MIN_STOCK_OVERSHOOT,
    Draft,
    Launch,
    assert_draft_pools_as_planned,
    class_defines,
    init_call_order,
    llama_draft,
    plugin_launches,
    predicted_plan,
)

pytestmark = pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S)
engine = pytest.mark.cpu_engine  # the tests that start an Engine

GEMMA, ASSISTANT, MIMO = DEFAULT_GEMMA4_TARGET, DEFAULT_GEMMA4_ASSISTANT, DEFAULT_MIMO_V2
STANDALONE = DEFAULT_STANDALONE_DRAFT
NUM_STEPS = 3  # multi-layer EAGLE's draft steps, one MTP runner and pool each
FROZEN_MODULE = "sglang.srt.speculative.frozen_kv_mtp_worker"
MLE_MODULE = "sglang.srt.speculative.multi_layer_eagle_worker_v2"
WINDOW = 2 * DFLASH_BLOCK_SIZE
DFLASH_FLAGS = {
    "num_steps": 1,
    "num_draft_tokens": DFLASH_BLOCK_SIZE,
    "speculative_draft_attention_backend": "triton",
}


def _attn(layers: int, kv_heads: int, head_dim: int) -> kv_specs.AttentionKVSpec:
    return attention_kv_spec(
        num_layers=layers,
        kv_dtype="bfloat16",
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=head_dim,
    )


def gemma_target_spec(ratio: float) -> HybridSWAKVSpec:
    heads, dim = GEMMA.kv_heads, GEMMA.head_dim
    return HybridSWAKVSpec(
        _attn(GEMMA.layer_types.count("full_attention"), heads, dim),
        _attn(GEMMA.layer_types.count("sliding_attention"), heads, dim),
        ratio,
    )


def mimo_target_spec(ratio: float) -> HybridSWAKVSpec:
    return HybridSWAKVSpec(
        _attn(MIMO.full_layers, MIMO.kv_heads, MIMO.head_dim),
        _attn(MIMO.swa_layers, MIMO.swa_kv_heads, MIMO.swa_head_dim),
        ratio,
    )


def mtp_pool_spec(ratio: float) -> HybridSWAKVSpec:
    """One MTP runner's pool: one SWA layer sized by the TARGET's split (``int(tokens * ratio)``),
    as a hybrid spec whose full part holds zero bytes."""
    return HybridSWAKVSpec(
        attention_kv_spec(num_layers=1, kv_dtype=MIMO.dtype),
        _attn(1, MIMO.swa_kv_heads, MIMO.swa_head_dim),
        ratio,
    )


def stand_in_pool_bytes() -> int:
    """The assistant's own pool: 64 tokens (+1 padding) over its layers, at its geometry."""
    tokens = FROZEN_KV_STAND_IN_TOKENS
    return (tokens + 1) * ASSISTANT.layers * ASSISTANT.kv_bytes_per_token_per_layer()


def hidden_state_row_bytes() -> int:
    return (NUM_STEPS - 1) * MIMO.hidden * MIMO.dtype_bytes


def _ratio(run: Launch) -> float:
    return run.report["server_args"]["swa_full_tokens_ratio"]


def _target_split(run: Launch) -> tuple[int, int]:
    """The target ``SWAKVPool``'s full and SWA tokens (its sub-pools' storage is not reported)."""
    config = runner(run.report, "target")["memory_pool_config"]
    full, swa = config["full_max_total_num_tokens"], config["swa_max_total_num_tokens"]
    assert swa == int(full * _ratio(run))
    return full, swa


def frozen_pool_bytes(run: Launch) -> tuple[int, list[int]]:
    """Bytes of the target pool and of the assistant's stand-in pool."""
    full, swa = _target_split(run)
    spec = gemma_target_spec(_ratio(run))
    target = (full + 1) * spec.full.bytes_per_token() + (swa + 1) * spec.swa.bytes_per_token()
    return target, [kv_buffer_bytes(runner(run.report, "draft")["kv_pool"])]


def mle_pool_bytes(run: Launch) -> tuple[int, list[int]]:
    """Bytes of the target pool and of each MTP pool, from the tiny geometry."""
    full, swa = _target_split(run)
    full_cell = MIMO.full_layers * MIMO.kv_bytes_per_token_per_layer()
    swa_cell = MIMO.swa_layers * MIMO.swa_kv_bytes_per_token_per_layer()
    config = runner(run.report, "target")["memory_pool_config"]
    drafts = []
    for draft in runners(run.report, "draft"):
        assert draft["memory_pool_config"] == config
        drafts.append((swa + 1) * MIMO.swa_kv_bytes_per_token_per_layer())
    return (full + 1) * full_cell + (swa + 1) * swa_cell, drafts


def frozen_plan(run: Launch) -> budget.PoolPlan:
    return predicted_plan(
        run,
        "FROZEN_KV_MTP",
        target_kv=gemma_target_spec(_ratio(run)),
        context_len=GEMMA.max_position_embeddings,
        draft_kv_pools=(),  # it reads the target's KV
        fixed_bytes=stand_in_pool_bytes(),
    )


def mle_plan(
    run: Launch, draft_pool: Callable[[float], budget.KVSpec] = mtp_pool_spec
) -> budget.PoolPlan:
    """The independent plan with ``draft_pool(ratio)`` priced once per draft step."""
    return predicted_plan(
        run,
        "EAGLE",
        target_kv=mimo_target_spec(_ratio(run)),
        context_len=MIMO.max_position_embeddings,
        draft_kv_pools=(draft_pool(_ratio(run)),) * NUM_STEPS,
        bytes_per_request=hidden_state_row_bytes(),
    )


DFLASH = functools.partial(
    llama_draft,
    "DFLASH",
    DEFAULT_DFLASH_DRAFT,
    eagle_drafts.tiny_dflash_draft,
    "DFlashDraftModel",
    draft_cell=256,
)
DRAFTS = {
    "STANDALONE": llama_draft(
        "STANDALONE",
        STANDALONE,
        llama_family.tiny_standalone_draft,
        "LlamaForCausalLM",
        {"disable_overlap_schedule": False},
        {},
        draft_cell=96,
    ),
    "DFLASH": DFLASH({"disable_overlap_schedule": True}, DFLASH_FLAGS),
    # A compact draft window: the draft's request table is its own.
    "DFLASH-window": DFLASH(
        {"disable_overlap_schedule": True, "speculative_draft_window_size": WINDOW},
        {**DFLASH_FLAGS, "speculative_draft_window_size": WINDOW},
        own_request_table=True,
    ),
    "FROZEN_KV_MTP": Draft(
        "FROZEN_KV_MTP",
        gemma4_mtp.tiny_gemma4_target,
        ("Gemma4ForCausalLM", "Gemma4AssistantForCausalLM"),
        {"disable_overlap_schedule": True},
        draft_runners=1,
        pool_bytes=frozen_pool_bytes,
        plan=frozen_plan,
        per_token=lambda ratio: gemma_target_spec(ratio).bytes_per_token(),
        checkpoint=gemma4_mtp.tiny_gemma4_assistant,
        truncation_bytes=1,
        # EAGLE, promoted to FROZEN_KV_MTP by SGLang for a Gemma 4 assistant
        flags={"algorithm": "EAGLE", "attention_backend": "triton"},
    ),
    "multi-layer EAGLE": Draft(
        "EAGLE",
        mimo_v2_mtp.tiny_mimo_v2_target,
        ("MiMoV2FlashForCausalLM", "MiMoV2MTP"),
        {  # SGLang's own MiMo-V2 rule
            "enable_multi_layer_eagle": True,
            "speculative_num_draft_tokens": NUM_STEPS + 1,
        },
        draft_runners=NUM_STEPS,
        pool_bytes=mle_pool_bytes,
        plan=mle_plan,
        per_token=lambda ratio: (
            mimo_target_spec(ratio).bytes_per_token()
            + NUM_STEPS * mtp_pool_spec(ratio).bytes_per_token()
        ),
        checkpoint=mimo_v2_mtp.tiny_mimo_v2_target,  # the MTP layers are the target's
        own_tensor=lambda name: name.startswith("model.mtp.layers."),
        truncation_bytes=NUM_STEPS,
        flags={
            "algorithm": "EAGLE",
            "num_steps": NUM_STEPS,
            "num_draft_tokens": NUM_STEPS + 1,
            "trust_remote_code": True,
        },
    ),
}
# The stock contrasts; CI keeps EAGLE3's (test_phased_eagle).
STOCK_CASES = [
    pytest.param(name, marks=pytest.mark.slow) for name in DRAFTS if "window" not in name
]


def own_weight_bytes(draft: Draft) -> int:
    return checkpoint_bytes(draft.checkpoint(), draft.own_tensor)


def dflash_stock_cell() -> int:
    """What 0.5.13.post1 charges a DFLASH token: the target cell scaled by (T + D) / T (ceil)."""
    t, d = DEFAULT_TARGET.layers, DEFAULT_DFLASH_DRAFT.layers
    return -(-DEFAULT_TARGET.kv_bytes_per_token() * (t + d) // t)


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Launch]:
    return plugin_launches(tmp_path_factory, DRAFTS)


# A STANDALONE / DFLASH draft's embed and lm_head bytes (the draft's own, charged in full).
EMBED_AND_HEAD_BYTES = {
    "STANDALONE": 2 * STANDALONE.vocab * STANDALONE.hidden * STANDALONE.dtype_bytes,
    "DFLASH": 0,
}


def _all_swa_pool(ratio: float) -> HybridSWAKVSpec:
    """One MTP layer's pool as an all-SWA model of its own would price it."""
    return HybridSWAKVSpec(
        _attn(0, MIMO.kv_heads, MIMO.head_dim),
        _attn(1, MIMO.swa_kv_heads, MIMO.swa_head_dim),
        ratio,
    )


@engine
@pytest.mark.parametrize("name", DRAFTS)
def test_phased_draft_pools_equal_the_independent_prediction_and_fill_the_budget(
    launch: Callable[..., Launch], name: str
) -> None:
    run, draft = launch(name), DRAFTS[name]
    report, breakdown = run.report, assert_draft_pools_as_planned(run, draft)
    if draft.algorithm == "DFLASH":
        # 128 + 128 B/token at the draft's geometry, not the (T + D) / T scaled target cell.
        assert dflash_stock_cell() == 384 < breakdown["priced_kv_bytes_per_token"]
        # A compact window: the same KV index space and the same sizing as without it.
        assert breakdown["tokens"] == launch("DFLASH").breakdown["tokens"]
    if name in EMBED_AND_HEAD_BYTES:
        own = own_weight_bytes(draft)
        embed_and_head = checkpoint_bytes(
            draft.checkpoint(), lambda n: "embed_tokens" in n or "lm_head" in n
        )
        assert embed_and_head == EMBED_AND_HEAD_BYTES[name] < own
        # Nothing of the draft is shared with the target: every draft byte is charged.
        assert breakdown["draft_weight_bytes"] == runner(report, "draft")["weight_bytes"] >= own
        assert breakdown["target_weight_bytes"] == runner(report, "target")["weight_bytes"]
        # SGLang's own measurement at the target's profiling holds both models entirely.
        resident = meter_budget(report).resident_bytes
        assert resident >= breakdown["target_weight_bytes"] + breakdown["draft_weight_bytes"]
    if name == "FROZEN_KV_MTP":
        # No draft KV is reserved: only the stand-in pool, which the plan still charged (used =
        # resident + target pool + stand-in pool).
        draft_runner = runner(report, "draft")
        dpool = draft_runner["kv_pool"]
        assert dpool["size"] == FROZEN_KV_STAND_IN_TOKENS
        assert kv_buffer_bytes(dpool) == stand_in_pool_bytes() == 16640
        assert breakdown["draft_kv_bytes_per_token"] == 0
        assert breakdown["draft_kv_pool_bytes"] == 0
        assert breakdown["priced_kv_bytes_per_token"] == breakdown["target_kv_bytes_per_token"]
        assert breakdown["allocated_draft_kv_pool_bytes"] == stand_in_pool_bytes()
        assert breakdown["used_bytes"] == (
            breakdown["resident_bytes"] + breakdown["target_kv_pool_bytes"] + stand_in_pool_bytes()
        )
        # The assistant's own weights (its tied embedding/head included); the target embedding
        # it binds is the target's tensor and is not counted twice.
        own = checkpoint_bytes(gemma4_mtp.tiny_gemma4_assistant())
        embedding = GEMMA.vocab * GEMMA.hidden * GEMMA.dtype_bytes
        assert own <= breakdown["draft_weight_bytes"] < own + embedding // 8
        assert draft_runner["weight_bytes"] >= breakdown["draft_weight_bytes"] + embedding
        assert meter_budget(report).resident_bytes >= (
            breakdown["target_weight_bytes"] + breakdown["draft_weight_bytes"]
        )
    if name == "multi-layer EAGLE":
        # One single-layer pool per draft step.
        target, drafts = runner(report, "target"), runners(report, "draft")
        assert [d["draft_model_idx"] for d in drafts] == list(range(NUM_STEPS))
        pools = [d["kv_pool"] for d in drafts]
        assert len({p["id"] for p in pools} | {target["kv_pool"]["id"]}) == NUM_STEPS + 1
        assert all(p["class"] == "SWAKVPool" and p["layer_num"] == 1 for p in pools)
        assert all(p["size"] == target["kv_pool"]["size"] for p in pools)
        # The MTP pools are priced at the target's split.
        plan = mle_plan(run)
        assert sum(mle_pool_bytes(run)[1]) == plan.draft_kv_pool_bytes
        assert breakdown["draft_kv_pool_bytes"] == breakdown["allocated_draft_kv_pool_bytes"]
        # Priced as an all-SWA model sizing itself (tokens, not tokens * ratio), each MTP pool
        # would be overcharged by 1 / ratio and the pools would come out smaller.
        assert mle_plan(run, _all_swa_pool).tokens < plan.tokens
        # The hidden-state buffer is charged, allocated right after the last MTP pool, before
        # the backends.
        rows = report["scheduler"]["max_running_requests"] + 1  # one per req-to-token row
        expected = rows * hidden_state_row_bytes()
        assert breakdown["draft_request_bytes"] == expected > 0
        last_pool = max(reading_seqs(report, "ModelRunnerKVCacheMixin.init_memory_pool", True))
        after = readings(report)[last_pool + 1]
        assert after["used_bytes"] - readings(report)[last_pool]["used_bytes"] >= expected
        # The MTP layers' own weights, all steps, are charged; the embedding and head are the
        # target's: each MTP runner loaded its own, all freed before the profiling.
        mtp = own_weight_bytes(draft)
        assert breakdown["draft_weight_bytes"] == mtp > 0
        embed_and_head = 2 * MIMO.vocab * MIMO.hidden * MIMO.dtype_bytes
        loads = reading_seqs(report, "load_model", True)
        peak = max(readings(report)[seq]["used_bytes"] for seq in loads)
        profile = profile_reading(report)["used_bytes"]
        assert peak - profile >= NUM_STEPS * embed_and_head - NUM_STEPS * 1024
        assert meter_budget(report).resident_bytes < (target["weight_bytes"] + mtp + 64 * 1024)


@engine
@pytest.mark.parametrize("name", STOCK_CASES)
def test_plugin_off_leaves_the_draft_outside_the_budget(
    launch: Callable[..., Launch], name: str
) -> None:
    on, off, draft = launch(name), launch(name, False), DRAFTS[name]
    assert not off.report["specinit_loaded"] and off.breakdown is None  # stock SGLang
    assert off.report["scheduler"]["spec_algorithm"] == draft.algorithm
    assert len(runners(off.report, "draft")) == draft.draft_runners
    target = runner(off.report, "target")
    # Stock sized the target pool before the draft existed ...
    stock = meter_budget(off.report)
    assert stock.resident_bytes < target["weight_bytes"] + 64 * 1024
    if name == "DFLASH":
        assert target["kv_pool"]["size"] == stock.available_bytes // dflash_stock_cell()
    elif name == "STANDALONE":
        assert kv_buffer_bytes(target["kv_pool"]) > stock.available_bytes - 64 * 1024
    # ... so the draft's weights and pools land on top of f x capacity.
    target_bytes, draft_bytes = draft.pool_bytes(off)
    total = target["weight_bytes"] + own_weight_bytes(draft) + target_bytes + sum(draft_bytes)
    assert total > MIN_STOCK_OVERSHOOT * F * CAPACITY
    assert target["kv_pool"]["size"] > runner(on.report, "target")["kv_pool"]["size"]


def test_all_swa_draft_pool_is_priced_at_the_target_split() -> None:
    ratio = 0.8
    target = mimo_target_spec(ratio)
    own = _all_swa_pool(ratio)
    priced = kv_specs.sized_by_target(own, target)
    tokens = 1000
    swa_cell = MIMO.swa_kv_bytes_per_token_per_layer()
    assert budget.kv_pool_bytes(priced, tokens, 1) == (int(tokens * ratio) + 1) * swa_cell
    assert priced.bytes_per_token() == pytest.approx(ratio * swa_cell)
    assert priced.padding_bytes(1) == swa_cell
    # Unchanged when the target has no full layers (its own split is all-SWA too) or is not
    # hybrid, and for drafts with full layers.
    all_swa_target = HybridSWAKVSpec(_attn(0, 2, 16), own.swa, ratio)
    assert kv_specs.sized_by_target(own, all_swa_target) is own
    assert kv_specs.sized_by_target(own, _attn(2, 2, 16)) is own
    assert kv_specs.sized_by_target(target, target) is target


def test_frozen_constructor_cut_points_follow_the_draft_load() -> None:
    calls = init_call_order(FROZEN_MODULE, "FrozenKVMTPWorker")
    order = ["super", "_bind_kv_context", "_init_draft_attn_backend", "init_cuda_graphs"]
    assert sorted(order, key=calls.index) == order, calls
    assert set(order[1:]) <= class_defines(FROZEN_MODULE, "FrozenKVMTPWorker")


def test_mle_constructor_cut_point_is_where_the_phases_expect_it() -> None:
    calls = init_call_order(MLE_MODULE, "MultiLayerEagleDraftWorker")
    order = ["draft_worker=", "init_lm_head", "req_to_hidden_states_pool="]
    order += ["init_attention_backend", "init_cuda_graphs"]
    assert set(order) <= set(calls) and sorted(order, key=calls.index) == order, calls
    # Nothing between the cut and the backends that the pool phase does not redo.
    between = calls[calls.index("init_lm_head") + 1 : calls.index("init_attention_backend")]
    assert set(between) <= {
        "req_to_hidden_states_pool=",
        "draft_tp_context=",
        "draft_tp_context",
    }, between
    multi_layer = [m for m in draft_workers.NEW_METHODS if m.class_name.startswith("MultiLayer")]
    assert multi_layer and all(method.module == MLE_MODULE for method in multi_layer)
    draft = class_defines(MLE_MODULE, "MultiLayerEagleDraftWorker")
    assert {"init_lm_head", "init_attention_backend", "init_cuda_graphs"} <= draft
