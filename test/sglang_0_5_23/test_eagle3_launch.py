"""The tiny EAGLE3 pair, plugin on, as a real ``sglang.Engine`` on cpu, on the releases before
0.5.23 whose rows in :mod:`harness.releases` list this file."""

from __future__ import annotations

from typing import Any

import pytest
from harness.launch.launch_0_5_23 import EAGLE3_DRAFT_VOCAB, ENGINE_TIMEOUT_S
from harness.launch.release_suite import (
    assert_fills_the_budget_at_profile,
    assert_plan_equals_server,
    launched_memory,
    plan_in_this_environment,
)
from harness.releases import RELEASES, Release, installed_row

ROW: Release = installed_row()  # type: ignore[assignment]  # the gate collects only served rows

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TIMEOUT_S * 2)]

# The labels of every other served release: none may appear in this release's log or plan.
OTHER_LABELS = [r.name for r in RELEASES if r.name != ROW.name and not ROW.name.startswith(r.name)]


def test_the_engine_fills_the_budget(eagle3_on: Any) -> None:
    memory = assert_fills_the_budget_at_profile(eagle3_on)
    assert memory["sglang_version"] == ROW.name
    # Every label names the installed release (compat.installed_sglang_version), no other.
    assert f"[specinit] KV pools on sglang {ROW.name} (" in eagle3_on.log
    assert [n for n in OTHER_LABELS if f"sglang {n} " in eagle3_on.log] == []
    # The draft priced at its own geometry; its duplicate embed/lm_head bound before profiling.
    assert memory["draft_kv_bytes_per_token"] != memory["target_kv_bytes_per_token"]
    assert memory["duplicate_bytes_at_profile"] == 0
    assert memory["stock_duplicate_bytes_at_profile"] > 0
    # Ranks read from the scheduler (release_shims.scheduler_ranks).
    assert (memory["tp_rank"], memory["pp_rank"]) == (0, 0)
    # The early binding skipped the stock init_token_map once: EAGLE3's hot-token map stays.
    assert eagle3_on.report["draft"]["hot_token_id_len"] == EAGLE3_DRAFT_VOCAB


def test_plan_in_this_environment_equals_the_server(eagle3_on: Any) -> None:
    planned = plan_in_this_environment(eagle3_on)
    # The stock column is this release's own configurator, labelled as such.
    assert planned["sglang_version"] == ROW.name
    assert planned["stock"]["release"] == ROW.name
    assert not [k for k in planned if k.startswith("stock_")]
    assert_plan_equals_server(planned, eagle3_on)


@pytest.mark.slow
def test_an_nnpl0_eagle3_draft_is_priced_although_stock_reserves_nothing(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from harness.launch.launch_0_5_23 import launch

    run = launch("EAGLE3-nnpl0", True, tmp_path_factory.mktemp(f"sglang{ROW.label}-nnpl0"))
    memory = launched_memory(run)
    assert memory["upstream_reserved_layers"] == 0
    assert memory["draft_kv_bytes_per_token"] > 0
    assert memory["draft_kv_pool_bytes"] == memory["allocated_draft_kv_pool_bytes"] > 0
    budget = memory["budget_bytes"]
    pools = sum(p.get("token_buffer_bytes", 0) for p in run.report["kv_pool_buffers"])
    assert 0.995 <= (run.resident_at_profile + pools) / budget <= 1
