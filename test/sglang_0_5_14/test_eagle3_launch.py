"""Live launches on the real sglang 0.5.14 / 0.5.15: the tiny EAGLE3 pair, plugin on, as a real
``sglang.Engine`` on device cpu (:mod:`harness.launch.launch_0_5_23`, kind ``EAGLE3``: target 2
layers x 2 KV heads x dim 16, an EAGLE3 draft with a reduced vocabulary and its own KV geometry).

The Engine comes up with the plugin's sizing (the ``SPECINIT_MEMORY`` breakdown), weights +
every pool fill the budget to [0.995, 1] as the scheduler report's tensors and meter show it
(not the plugin's own numbers), the draft pool is priced at the draft's geometry (stock prices
it at the target's), the duplicate embed was freed before profiling, and EAGLE3's hot-token map
survived the early binding; ``sglang-specinit plan --resident-bytes`` in this environment
(the release's own server-args logic and pool code, ``sglang_0_5_14/planner_replay.py``) plans what
the server allocated (the planner's command: :mod:`harness.launch.release_suite`). The Engine
~40-200 s here (the machine is shared), the planner ~15 s.
"""

from __future__ import annotations

from typing import Any

import pytest
from harness.launch.launch_0_5_23 import EAGLE3_DRAFT_VOCAB, ENGINE_TIMEOUT_S
from harness.launch.release_suite import (
    PLAN_KEYS,
    assert_plan_equals_server,
    engine_kwargs,
    launched_memory,
    plan_in_this_environment,
)
from harness.reports.report_reading import meter_budget

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TIMEOUT_S * 2)]


def pool(run: Any, role: str) -> dict[str, Any]:
    (found,) = [p for p in run.report["kv_pool_buffers"] if p["role"] == role]
    return found


def assert_fills_the_budget(run: Any, kind: str) -> dict[str, Any]:
    from sglang_specinit.compat import installed_sglang_version

    memory = launched_memory(run)
    assert run.report["specinit_loaded"]
    assert memory["sglang_version"] == installed_sglang_version()
    # SGLang's own budget from the meter's two readings (pre-load, profiling).
    meter = meter_budget(run.report, float(engine_kwargs(kind)["mem_fraction_static"]))
    assert memory["budget_bytes"] == meter.budget_bytes
    pools = sum(p["token_buffer_bytes"] for p in run.report["kv_pool_buffers"])
    used = meter.resident_bytes + pools + memory.get("draft_request_bytes", 0)
    assert 0.995 <= used / meter.budget_bytes <= 1, (used, meter.budget_bytes)
    assert memory["target_kv_pool_bytes"] == pool(run, "target")["token_buffer_bytes"]
    assert memory["draft_kv_pool_bytes"] == pool(run, "draft")["token_buffer_bytes"]
    return memory


def test_the_engine_fills_the_budget_with_the_draft_at_its_own_geometry(eagle3_on: Any) -> None:
    memory = assert_fills_the_budget(eagle3_on, "EAGLE3")
    draft = pool(eagle3_on, "draft")["parts"][0]
    target = pool(eagle3_on, "target")["parts"][0]
    # Bytes per token row as allocated; stock would have priced the draft's layer at the
    # target's per-layer bytes.
    draft_row = draft["token_buffer_bytes"] / draft["token_rows"]
    target_layer_row = target["token_buffer_bytes"] / target["token_rows"] / target["layer_buffers"]
    assert memory["draft_kv_bytes_per_token"] == draft_row != target_layer_row
    # The draft's own embed was bound to the target's before profiling (freed at sizing), and
    # EAGLE3's reduced vocabulary map survived the skipped stock init_token_map.
    assert memory["stock_duplicate_bytes_at_profile"] > 0
    assert memory["duplicate_bytes_at_profile"] == 0
    assert eagle3_on.report["draft"]["hot_token_id_len"] == EAGLE3_DRAFT_VOCAB


def test_plan_in_this_environment_equals_the_server(eagle3_on: Any) -> None:
    planned = plan_in_this_environment(eagle3_on)
    assert all(planned.get(key) is not None for key in PLAN_KEYS), planned
    # The three-column report: this release's own rule is the "upstream 0.5.14" column.
    assert "upstream_0_5_14" in planned and "stock_0_5_23" not in planned
    assert_plan_equals_server(planned, eagle3_on)


@pytest.mark.slow
def test_a_draft_with_nnpl_0_is_priced_as_allocated(eagle3_nnpl0_on: Any) -> None:
    """Stock reserves nothing for ``num_nextn_predict_layers: 0`` (``eagle_draft_num_layers``
    0, ``model_runner.py:447-449`` in 0.5.14) although the draft allocates its layer. Slow: CI
    covers the same pricing path with the EAGLE3 launch above (its draft pool is priced by
    building it, whatever the config says)."""
    memory = assert_fills_the_budget(eagle3_nnpl0_on, "EAGLE3-nnpl0")
    assert memory["upstream_reserved_layers"] == 0
    assert memory["draft_kv_pool_bytes"] > 0
