"""sglang 0.5.23 with the plugin: multi-layer EAGLE (MiMo-V2 MTP) and frozen-KV MTP (Gemma 4
assistant), the two draft kinds whose pools 0.5.23 reserves by a layer count they do not have."""

from __future__ import annotations

import pytest
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S, MULTI_LAYER_STEPS
from harness.reports.report_reading import kv_buffer_bytes
from sglang_specinit.model_facts import FROZEN_KV_STAND_IN_TOKENS

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TIMEOUT_S * 2)]


def assert_budget_filled_to_within_one_page(run) -> None:
    memory = run.memory
    assert memory is not None, run.log[-3000:]
    assert memory["allocated_target_kv_pool_bytes"] == memory["target_kv_pool_bytes"]
    # Token-sized draft pools plus fixed-size ones (frozen-KV MTP's stand-in pool).
    assert memory["allocated_draft_kv_pool_bytes"] == (
        memory["draft_kv_pool_bytes"] + memory["draft_fixed_pool_bytes"]
    )
    budget = int(0.5 * run.pre_load_free_bytes)
    keys = "allocated_target_kv_pool_bytes allocated_draft_kv_pool_bytes draft_request_bytes"
    used = run.resident_at_profile + sum(memory[key] for key in keys.split())
    one_page = memory["page_size"] * memory["priced_kv_bytes_per_token"]
    assert used <= budget
    # One page of every pool, plus one more for the SWA token count SGLang floors (tokens x ratio).
    assert budget - used < 2 * (one_page + 1)


@pytest.mark.launches(("MTP-multi-layer", True))
def test_multi_layer_eagle_prices_one_pool_per_draft_runner(engine_runs) -> None:
    run = engine_runs("MTP-multi-layer", True)
    drafts = run.draft_runners()
    assert len(drafts) == MULTI_LAYER_STEPS
    assert len({d["kv_pool"]["id"] for d in drafts}) == MULTI_LAYER_STEPS
    assert all(d["max_total_num_tokens"] == run.memory["tokens"] for d in drafts)
    assert_budget_filled_to_within_one_page(run)


@pytest.mark.launches(("FROZEN_KV_MTP", True))
def test_frozen_kv_mtp_is_charged_its_stand_in_pool_only(engine_runs) -> None:
    run = engine_runs("FROZEN_KV_MTP", True)
    memory = run.memory
    assert run.report["draft"]["worker_class"] == "FrozenKVMTPWorkerV2"
    (draft,) = run.draft_runners()
    # The stand-in is priced at the token count SGLang built, charged what its buffers hold.
    assert draft["kv_pool"]["size"] == FROZEN_KV_STAND_IN_TOKENS
    assert memory["draft_fixed_pool_bytes"] == kv_buffer_bytes(draft["kv_pool"]) > 0
    # 0.5.23 would reserve draft layers here; this package charges no draft KV per token.
    assert memory["upstream_reserved_layers"] > 0
    assert memory["draft_kv_bytes_per_token"] == 0
    assert memory["priced_kv_bytes_per_token"] == memory["target_kv_bytes_per_token"]
    assert_budget_filled_to_within_one_page(run)
