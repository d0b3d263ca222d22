"""sglang 0.5.23 with the plugin: every draft kind priced at its own geometry, the budget
filled to within one page, the duplicate embed/lm_head gone before profiling."""

from __future__ import annotations

import pytest
from harness.checkpoints import llama_family
from harness.checkpoints.eagle_drafts import own_lm_head_problems
from harness.launch.launch_0_5_23 import EAGLE3_DRAFT_VOCAB, ENGINE_TIMEOUT_S, STANDALONE_SHAPE

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TIMEOUT_S * 2)]

TARGET = llama_family.DEFAULT_TARGET
EMBED = TARGET.vocab * TARGET.hidden * 2
STANDALONE = (STANDALONE_SHAPE.layers, STANDALONE_SHAPE.kv_heads, STANDALONE_SHAPE.head_dim)
# Per draft: its pool's (layers, kv heads, head dim); 0.5.23's own reserve per token (int(256 *
# d / 2)); the embed/lm_head copies stock holds at profiling (EAGLE3's head is its own).
DRAFTS = {
    "EAGLE": ((1, TARGET.kv_heads, TARGET.head_dim), 128, 2 * EMBED),
    "EAGLE3": ((1, 1, 48), 128, EMBED),
    "EAGLE3-nnpl0": ((1, 1, 48), 0, EMBED),
    "STANDALONE": (STANDALONE, 128, 0),
}
# CI prices the two drafts 0.5.23 reserves wrongly; EAGLE and STANDALONE (target geometry): slow.
PRICED_IN_CI = ("EAGLE3", "EAGLE3-nnpl0")
KIND_PARAMS = [
    kind if kind in PRICED_IN_CI else pytest.param(kind, marks=pytest.mark.slow) for kind in DRAFTS
]


def kv_bytes(layers: int, heads: int, head_dim: int) -> int:
    return layers * heads * head_dim * 2 * 2  # K + V, bf16


@pytest.mark.parametrize("kind", KIND_PARAMS)
@pytest.mark.launches(("{kind}", True))
def test_draft_pool_is_priced_at_its_geometry_fills_the_budget_and_binds_early(
    engine_runs, kind
) -> None:
    run = engine_runs(kind, True)
    memory = run.memory
    assert memory is not None, run.log[-3000:]
    (draft,) = run.draft_runners()
    (layers, heads, head_dim), upstream_reserve, duplicates = DRAFTS[kind]
    pool = draft["kv_pool"]
    assert (pool["layer_num"], pool["head_num"], pool["head_dim"]) == (layers, heads, head_dim)
    assert memory["draft_kv_bytes_per_token"] == kv_bytes(layers, heads, head_dim)
    # SGLang's own configurator, built for the draft runner, agrees on the draft's cell.
    assert draft["sglang_cell_size"] == kv_bytes(layers, heads, head_dim)
    reserved = memory["upstream_reserved_layers"] * TARGET.kv_bytes_per_token() // TARGET.layers
    assert reserved == upstream_reserve
    # Both pools hold the same token count, and what SGLang allocated is what was planned.
    target = run.runner("target")
    assert draft["max_total_num_tokens"] == target["max_total_num_tokens"] == memory["tokens"]
    assert memory["allocated_target_kv_pool_bytes"] == memory["target_kv_pool_bytes"]
    assert memory["allocated_draft_kv_pool_bytes"] == memory["draft_kv_pool_bytes"]
    assert pool["k_bytes"] + pool["v_bytes"] == memory["draft_kv_pool_bytes"]

    # Weights and pools fill the budget to within one page.
    budget = int(0.5 * run.pre_load_free_bytes)
    assert memory["budget_bytes"] == budget
    # Profiled weights + allocated KV buffers (req-to-token and free lists: outside, as stock).
    used = run.resident_at_profile + run.kv_pool_bytes()
    both_per_token = memory["target_kv_bytes_per_token"] + memory["draft_kv_bytes_per_token"]
    assert used <= budget
    assert budget - used < memory["page_size"] * both_per_token

    # The duplicate embed and lm_head are gone before profiling.
    assert memory["duplicate_bytes_at_profile"] == 0  # measured: what SGLang bound later
    assert memory["stock_duplicate_bytes_at_profile"] == duplicates
    # Resident at profiling: both models' weights (shared ones once), EAGLE3's int64 hot-token
    # map and a few KiB of small tensors; not the duplicates.
    hot_token_map = 8 * (run.report["draft"]["hot_token_id_len"] or 0)
    weights = memory["target_weight_bytes"] + memory["draft_weight_bytes"] + hot_token_map
    assert abs(run.resident_at_profile - weights) < 16 << 10
    assert run.resident_at_profile == memory["resident_bytes"]
    if kind == "EAGLE3":
        # EAGLE3 keeps its hot-token map and its own lm_head (only the embedding is bound).
        assert run.report["draft"]["hot_token_id_len"] == EAGLE3_DRAFT_VOCAB
        assert own_lm_head_problems(run.report) == []
    if kind == "EAGLE3-nnpl0":  # priced although upstream reserves nothing
        priced = TARGET.kv_bytes_per_token() + kv_bytes(layers, heads, head_dim)
        assert memory["priced_kv_bytes_per_token"] == priced
