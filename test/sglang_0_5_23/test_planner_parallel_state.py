"""The planner's 0.5.23 replay on the ``ParallelState`` generation without an Engine: the reads
where 0.5.19 differs from 0.5.20 (``release_shims``) answer as the installed release does, or on
0.5.16 - 0.5.18 ``dataclass_replay``'s rank-0 widths do; and ``sglang-specinit plan`` runs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from harness.planner_cli import plan_json
from harness.releases import Release, installed_row
from sglang_specinit.planner.columns import STOCK_RULE

ROW: Release = installed_row()  # type: ignore[assignment]  # the gate collects only served rows


@pytest.mark.parametrize(
    ("tp", "dp", "cp", "dp_attention"),
    [(1, 1, 1, False), (4, 1, 1, False), (4, 2, 1, True), (8, 2, 2, True), (8, 4, 1, False)],
)
def test_attention_widths_are_the_ones_the_scheduler_computes(
    tp: int, dp: int, cp: int, dp_attention: bool
) -> None:
    """0.5.19 / 0.5.20: release_shims' reads; 0.5.16 - 0.5.18 (resolved in
    ``ServerArgs.__post_init__``, no config-width getters): dataclass_replay's rank-0 widths."""
    from sglang.srt.layers.dp_attention import compute_dp_attention_world_info
    from sglang.srt.runtime_context import get_parallel
    from sglang_specinit.sglang_0_5_23.dataclass_replay import rank0_widths
    from sglang_specinit.sglang_0_5_23.release_shims import attn_tp_size_of, derived_server_arg

    ones = dict.fromkeys(("pp_size", "ep_size", "moe_dp_size", "dcp_size"), 1)
    args = SimpleNamespace(
        tp_size=tp, dp_size=dp, attn_cp_size=cp, enable_dp_attention=dp_attention, **ones
    )
    _rank, attn_tp, _dp_rank, attn_dp = compute_dp_attention_world_info(dp_attention, 0, tp, dp, cp)
    if not ROW.dataclass_server_args:
        assert attn_tp_size_of(args) == attn_tp
        assert derived_server_arg(args, "attn_dp_size") == attn_dp
        return
    parallel = get_parallel()
    with rank0_widths(args):
        assert (parallel.tp_size, parallel.attn_tp_size) == (tp, attn_tp)
        assert (parallel.attn_dp_size, parallel.attn_cp_size) == (attn_dp, cp)
        assert (parallel.attn_dcp_size, parallel.dcp_enabled) == (1, False)
    assert "attn_tp_size" not in parallel._overrides


# DeepSeek-V3's NEXTN example: its configurators read the published algorithm (EAGLE), as the
# runner does (0.5.19's from_string has no NEXTN alias).
NEXTN_EXAMPLE = ["--example", "deepseek-v3-mtp"]


@pytest.mark.skipif(
    ROW.runs("test_eagle3_launch.py"),
    reason=f"{ROW.name}: test_eagle3_launch.py plans the launch it starts, plan == server",
)
@pytest.mark.parametrize("example", [[], NEXTN_EXAMPLE], ids=["default", "nextn"])
def test_the_plan_runs_and_the_pool_code_reads_published_widths(example: list[str]) -> None:
    from sglang.srt.runtime_context import get_parallel

    plan = plan_json(*example)
    if example:  # its MLA row: 512 + 64 bf16 values a layer, 61 target layers, 1 draft layer
        rows = plan["target_kv_bytes_per_token"], plan["draft_kv_bytes_per_token"]
        assert rows == (61 * (512 + 64) * 2, (512 + 64) * 2)
    release = ROW.name
    assert plan["sglang_version"] == release
    assert plan["tokens"] > 0 and plan["draft_kv_pool_bytes"] > 0
    # The stock column is this release's own configurator, priced on the same inputs.
    stock = plan["stock"]
    assert (stock["release"], stock["rule"]) == (release, STOCK_RULE)
    assert stock["budget_bytes"] == plan["budget_bytes"]
    parallel = get_parallel()
    if ROW.dataclass_server_args:  # the planner's override is gone again (dataclass_replay)
        assert "attn_tp_size" not in parallel._overrides
        return
    widths = (parallel.attn_tp_size, parallel.attn_dp_size, parallel.attn_dcp_size)
    assert widths == (plan["tp_size"], 1, 1)
