"""One live launch on the real sglang 0.5.20 (or 0.5.16's - 0.5.19's wheels over its venv,
by hand): the tiny EAGLE3 pair, plugin on, as a real ``sglang.Engine`` on device cpu
(:mod:`harness.launch.launch_0_5_23`, kind ``EAGLE3``: target 2 layers x 2 KV heads x dim 16, an
EAGLE3 draft with a reduced vocabulary).

The 0.5.20 Engine comes up with the plugin's sizing (the ``SPECINIT_MEMORY`` breakdown, not
stock's: the draft priced at its own geometry, its embed/lm_head bound before profiling),
weights + every pool fill the budget to [0.995, 1], and ``sglang-specinit plan
--resident-bytes`` in this environment (0.5.20's own server-args logic and pool code, through
``release_shims``) plans what the server allocated (the shared checks:
:mod:`harness.launch.release_suite`). The Engine ~100-200 s here, the planner ~35-45 s.
"""

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

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TIMEOUT_S * 2)]


def test_the_0_5_20_engine_fills_the_budget(eagle3_on: Any) -> None:
    import sglang

    memory = assert_fills_the_budget_at_profile(eagle3_on)
    assert sglang.__version__ in ("0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20")
    assert memory["sglang_version"] == sglang.__version__
    # The draft's pool is priced at its own geometry (EAGLE3: one layer of its own), not at
    # the target's, and the draft's duplicate embed/lm_head was bound before profiling.
    assert memory["draft_kv_bytes_per_token"] != memory["target_kv_bytes_per_token"]
    assert memory["duplicate_bytes_at_profile"] == 0
    assert memory["stock_duplicate_bytes_at_profile"] > 0
    # Ranks read from the scheduler's ParallelState (release_shims.scheduler_ranks).
    assert (memory["tp_rank"], memory["pp_rank"]) == (0, 0)
    # The early binding skipped the stock init_token_map once: EAGLE3's hot-token map stays.
    assert eagle3_on.report["draft"]["hot_token_id_len"] == EAGLE3_DRAFT_VOCAB


@pytest.mark.slow
def test_an_nnpl0_eagle3_draft_is_priced_although_0_5_20_reserves_nothing(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """``num_nextn_predict_layers: 0``: stock 0.5.20 reserves 0 draft layers
    (``spec_aux_hidden_state.py:96-98``), the plugin prices the pool the draft allocates.
    Slow (one more Engine, ~2 min here); CI runs the same pricing path on the EAGLE3 launch
    above, and 0.5.23's CI suite runs this draft."""
    from harness.launch.launch_0_5_23 import launch

    run = launch("EAGLE3-nnpl0", True, tmp_path_factory.mktemp("sglang0520-nnpl0"))
    memory = launched_memory(run)
    assert memory["upstream_reserved_layers"] == 0
    assert memory["draft_kv_bytes_per_token"] > 0
    assert memory["draft_kv_pool_bytes"] == memory["allocated_draft_kv_pool_bytes"] > 0
    budget = memory["budget_bytes"]
    pools = sum(p.get("token_buffer_bytes", 0) for p in run.report["kv_pool_buffers"])
    assert 0.995 <= (run.resident_at_profile + pools) / budget <= 1


def test_plan_in_the_0_5_20_environment_equals_the_server(eagle3_on: Any) -> None:
    # The planner builds its pricing pools with 0.5.20's pool code (release_suite.planner_env).
    assert_plan_equals_server(plan_in_this_environment(eagle3_on), eagle3_on)
