"""The tiny EAGLE3 pairs, plugin on and off, as real ``sglang.Engine`` on cpu on 0.5.14 / 0.5.15."""

from __future__ import annotations

from typing import Any

import pytest
from harness.checkpoints.eagle_drafts import own_lm_head_problems
from harness.launch.launch_0_5_23 import EAGLE3_DRAFT_VOCAB, ENGINE_TIMEOUT_S
from harness.launch.release_suite import (
    PLAN_KEYS,
    assert_plan_equals_server,
    engine_kwargs,
    launched_memory,
    plan_in_this_environment,
    served_tokens,
)
from harness.reports.report_reading import meter_budget, pre_load_reading

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TIMEOUT_S * 2)]


def pool(run: Any, role: str) -> dict[str, Any]:
    (found,) = [p for p in run.report["kv_pool_buffers"] if p["role"] == role]
    return found


@pytest.mark.parametrize(
    ("kind", "reserved_layers"),
    [("EAGLE3", 1), ("EAGLE3-nnpl0", 0), pytest.param("EAGLE3-nnpl1", 1, marks=pytest.mark.slow)],
)
@pytest.mark.launches(("{kind}", True), ("{kind}", False))
def test_plan_in_this_environment_equals_the_server(
    engine_runs: Any, kind: str, reserved_layers: int
) -> None:
    """The plan of ``kind`` is the plugin Engine's breakdown; its stock column sizes the stock
    Engine's pool (a draft without ``num_nextn_predict_layers``: its layer count, 1); the plugin
    Engine fills its budget, the draft at its own geometry."""
    from sglang_specinit.compat import installed_sglang_version

    plugin, stock = engine_runs(kind, True), engine_runs(kind, False)
    planned = plan_in_this_environment(plugin, kind)
    assert_plan_equals_server(planned, plugin)
    assert pre_load_reading(stock.report) == pre_load_reading(plugin.report)
    assert planned["tokens"] == served_tokens(plugin)
    column = planned["stock"]
    assert column["tokens"] == served_tokens(stock), (column["tokens"], served_tokens(stock))
    # The stock server's cell: the target's 2 layers of 128 B/token, one more per reserved layer.
    cell = column["priced_kv_bytes_per_token"]
    assert stock.runner("target")["sglang_cell_size"] == cell
    assert cell == planned["target_kv_bytes_per_token"] * (2 + reserved_layers) // 2
    assert all(planned.get(key) is not None for key in PLAN_KEYS), planned
    # Two columns: the installed release's stock and this package's; no other release's rule.
    assert planned["sglang_version"] == str(installed_sglang_version())
    assert not [key for key in planned if key.startswith("upstream_")]
    if kind == "EAGLE3-nnpl1":
        return

    memory = launched_memory(plugin)
    assert plugin.report["specinit_loaded"]
    assert memory["sglang_version"] == installed_sglang_version()
    # SGLang's own budget from the meter's two readings (pre-load, profiling).
    meter = meter_budget(plugin.report, float(engine_kwargs(kind)["mem_fraction_static"]))
    assert memory["budget_bytes"] == meter.budget_bytes
    pools = sum(p["token_buffer_bytes"] for p in plugin.report["kv_pool_buffers"])
    used = meter.resident_bytes + pools + memory.get("draft_request_bytes", 0)
    assert 0.995 <= used / meter.budget_bytes <= 1, (used, meter.budget_bytes)
    assert memory["target_kv_pool_bytes"] == pool(plugin, "target")["token_buffer_bytes"]
    assert memory["draft_kv_pool_bytes"] == pool(plugin, "draft")["token_buffer_bytes"]
    if kind == "EAGLE3-nnpl0":
        assert memory["upstream_reserved_layers"] == 0
        assert memory["draft_kv_pool_bytes"] > 0
        return
    draft = pool(plugin, "draft")["parts"][0]
    target = pool(plugin, "target")["parts"][0]
    # Bytes per token row as allocated (stock prices the draft's layer at the target's).
    draft_row = draft["token_buffer_bytes"] / draft["token_rows"]
    target_layer_row = target["token_buffer_bytes"] / target["token_rows"] / target["layer_buffers"]
    assert memory["draft_kv_bytes_per_token"] == draft_row != target_layer_row
    # The draft's embed was bound before profiling; its hot-token map survived the skipped init.
    assert memory["duplicate_bytes_at_profile"] == 0  # measured: what SGLang bound later
    assert memory["stock_duplicate_bytes_at_profile"] > 0
    assert plugin.report["draft"]["hot_token_id_len"] == EAGLE3_DRAFT_VOCAB
    # The draft's own trained head stays its own (EAGLE3 binds only the embedding).
    assert own_lm_head_problems(plugin.report) == []
