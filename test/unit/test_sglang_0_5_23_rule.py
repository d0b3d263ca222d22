"""The sglang 0.5.23 rule (``sglang_0_5_23.stock_rule.upstream_0_5_23_plan``) and
``plan --sglang-version 0.5.23``.

Numbers are hand-computed from 0.5.23's pool configurators (``pool_configurator.py``:
``cell + int(cell * d / n)``, sized without padding pages, after both models' weights and the
draft's duplicate embed/lm_head are resident). The same rule is checked against the real 0.5.23
init in ``test/sglang_0_5_23/test_stock_and_identity.py``.
"""

from __future__ import annotations

import json

import pytest
from sglang_specinit.budget import (
    AttentionKVSpec,
    BudgetInputs,
    DraftSpec,
    HybridSWAKVSpec,
    plan_pools,
)
from sglang_specinit.planner.cli import main
from sglang_specinit.report import BREAKDOWN_KEYS
from sglang_specinit.sglang_0_5_23.stock_rule import upstream_0_5_23_plan


def bf16_mha(layers: int, kv_heads: int, head_dim: int) -> AttentionKVSpec:
    return AttentionKVSpec(
        num_layers=layers,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=head_dim,
        element_bytes=2,
    )


MIB = 1 << 20
TARGET = bf16_mha(2, 2, 16)  # 256 B
EAGLE3_POOL = bf16_mha(1, 1, 48)  # 192


def inputs(draft: DraftSpec | None, **kw) -> BudgetInputs:
    base = dict(
        pre_load_free_bytes=256 * MIB,
        mem_fraction_static=0.5,
        target_kv=TARGET,
        target_weight_bytes=8 * MIB,
        context_len=2048,
        max_running_requests=48,
        draft=draft,
    )
    base.update(kw)
    return BudgetInputs(**base)


def eagle3(d: int, **kw) -> DraftSpec:
    base = dict(
        algorithm="EAGLE3",
        kv_pools=(EAGLE3_POOL,),
        weight_bytes=2 * MIB,
        shared_weight_bytes=4 * MIB,
        upstream_reserved_layers=d,
    )
    base.update(kw)
    return DraftSpec(**base)


def test_draft_reserved_at_the_targets_geometry() -> None:
    plan = upstream_0_5_23_plan(inputs(eagle3(1)))
    assert plan.priced_bytes_per_token == 256 + 128
    # Budget 128 MiB minus 8 + 2 weights and the 4 MiB duplicate resident at profiling.
    assert plan.tokens == (128 - 14) * MIB // 384
    assert plan.resident_bytes == 10 * MIB  # the duplicate is freed afterwards
    # 192 B/token allocated where 128 were reserved: over budget.
    assert plan.headroom_bytes < 0
    assert plan.max_running_requests == 48


def test_nnpl0_reserves_nothing_and_ours_prices_the_draft() -> None:
    stock = upstream_0_5_23_plan(inputs(eagle3(0)))
    ours = plan_pools(inputs(eagle3(0)))
    assert stock.priced_bytes_per_token == 256
    assert ours.priced_bytes_per_token == 256 + 192
    assert stock.headroom_bytes < 0 <= ours.headroom_bytes < 448


def test_frozen_kv_mtp_gets_a_phantom_reserve() -> None:
    draft = DraftSpec(algorithm="FROZEN_KV_MTP", weight_bytes=MIB, upstream_reserved_layers=1)
    stock = upstream_0_5_23_plan(inputs(draft))
    ours = plan_pools(inputs(draft))
    assert stock.priced_bytes_per_token == 384
    assert stock.draft_kv_pool_bytes == 0
    assert ours.priced_bytes_per_token == 256


def test_dflash_is_priced_from_the_draft() -> None:
    draft = eagle3(5, algorithm="DFLASH", shared_weight_bytes=0)
    assert upstream_0_5_23_plan(inputs(draft)).priced_bytes_per_token == 256 + 192


def test_hybrid_swa_reserves_full_attention_layers() -> None:
    full = bf16_mha(2, 2, 16)
    swa = bf16_mha(4, 2, 16)
    target = HybridSWAKVSpec(full=full, swa=swa, swa_full_tokens_ratio=0.5)
    plan = upstream_0_5_23_plan(inputs(eagle3(1), target_kv=target))
    assert plan.priced_bytes_per_token == 256 + 0.5 * 512 + 128


def test_user_max_running_requests_is_clamped_per_worker() -> None:
    plan = upstream_0_5_23_plan(inputs(None, max_running_requests=1, dp_size=2))
    assert plan.max_running_requests == 1  # max(1, 1 // 2)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_prints_stock_0_5_23_beside_ours(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--sglang-version", "0.5.23"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "sglang-specinit" in line)
    assert "stock 0.5.23" in header and "0.5.14" not in out and "0.5.13" not in header


def test_plan_json_has_the_same_keys_for_0_5_23(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "--sglang-version", "0.5.23")
    legacy = run_json(capsys, "--sglang-version", "0.5.14")
    assert data["sglang_version"] == "0.5.23"
    assert set(BREAKDOWN_KEYS) <= set(data["stock_0_5_23"]) and set(BREAKDOWN_KEYS) <= set(data)
    assert "stock_0_5_13" in legacy and "stock_0_5_13" not in data
    # Same flags, same inputs: this package's column does not depend on the release shown.
    assert data["tokens"] == legacy["tokens"]
    assert (
        data["stock_0_5_23"]["priced_kv_bytes_per_token"]
        == (legacy["upstream_0_5_14"]["priced_kv_bytes_per_token"])
    )
    assert data["stock_0_5_23"]["headroom_bytes"] > 0  # this example's draft: 1 layer, same KV


def test_default_release_is_the_installed_one(capsys: pytest.CaptureFixture[str]) -> None:
    # .venv has 0.5.13.post1: the default report is the 0.5.13.post1 one.
    assert "stock_0_5_13" in run_json(capsys)
