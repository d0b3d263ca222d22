"""The budget model against SGLang's own arithmetic, on real ModelRunners (stock, plugin off)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints import llama_family, tiny_configs
from harness.checkpoints.llama_layout import TinyLlamaShape
from harness.launch.engine import ENGINE_TEST_TIMEOUT_S, cpu_engine
from harness.reports.report_reading import profile_reading, torch_distributed_readings
from sglang_specinit import budget

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S)]

CAPACITY = 64 << 20
FRACTION = 0.5

LLAMA, TARGET = llama_family.tiny_llama_target, llama_family.DEFAULT_TARGET
GEOMETRIES = {  # name: (writer, shape, engine overrides)
    "mla-bf16": (tiny_configs.tiny_mla_target, TARGET, {}),
    "mha-wide-heads": (LLAMA, replace(TARGET, heads=4, kv_heads=4, head_dim=32, layers=3), {}),
    "gqa-fp8-kv": (LLAMA, TARGET, {"kv_cache_dtype": "fp8_e4m3"}),
    "gqa-page16": (LLAMA, replace(TARGET, kv_heads=1, head_dim=24), {"page_size": 16}),
}


def assert_sizing_matches_sglang(
    report: dict[str, Any], model_dir: Path, shape: TinyLlamaShape, overrides: dict[str, Any]
) -> None:
    """A stock launch of ``model_dir`` (``shape``, ``overrides``) at CAPACITY and FRACTION: its
    cell, tokens and pool are the planner's."""
    from harness.geometry.specs import kv_spec_from_model_config, runner_layer_count
    from sglang.srt.configs.model_config import ModelConfig
    from sglang_specinit.planner.gpus import DeviceSpec
    from sglang_specinit.sglang_0_5_13.planner_replay import REPLAY, resolve_kv_dtype

    (runner,) = report["model_runners"]
    page = overrides.get("page_size", 1)

    # The target's KV spec the way ``sglang-specinit plan`` derives it (no runner).
    config = ModelConfig(str(model_dir))
    spec = kv_spec_from_model_config(
        config,
        resolve_kv_dtype(overrides.get("kv_cache_dtype", "auto"), config),
        attn_tp_size=1,
        num_layers=runner_layer_count(config, is_draft=False),
        swa_full_tokens_ratio=0.8,
    )
    assert spec.bytes_per_token() == runner["sglang_cell_size"]

    # The FIRST init_torch_distributed reading (before_avail_memory), not pre_model_load_memory
    # (the 2nd, taken after the distributed setup): it shows a few bytes more free.
    pre_free = torch_distributed_readings(report)[0]["free_bytes"]
    post_free = profile_reading(report)["free_bytes"]
    inputs = budget.BudgetInputs(
        pre_load_free_bytes=pre_free,
        mem_fraction_static=FRACTION,
        target_kv=spec,
        target_weight_bytes=pre_free - post_free,
        page_size=page,
        context_len=shape.max_position_embeddings,
    )
    # The planner's stock column (the replay's ``stock_plan``): 0.5.13.post1's own sizing on a
    # runner without weights.
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in overrides.items()]
    argv = ["--model-path", str(model_dir), "--device", "cpu", f"--mem-fraction-static={FRACTION}"]
    args = REPLAY.parse_launch(argv + flags)
    device = DeviceSpec(name="cpu", total_bytes=CAPACITY, pre_load_free_bytes=pre_free)
    stock = REPLAY.pool_prices(REPLAY.resolve(args, device), device).stock_plan(inputs)
    assert stock.tokens == runner["max_total_num_tokens"]
    assert stock.max_running_requests == report["scheduler"]["max_running_requests"]
    # The pool SGLang allocated is what the budget model says a pool of that size costs.
    pool = runner["kv_pool"]
    kv_bytes = pool.get("kv_buffer_bytes", pool.get("k_bytes", 0) + pool.get("v_bytes", 0))
    assert kv_bytes == budget.kv_pool_bytes(spec, stock.tokens, page)


# GQA runs in CI (test_phased_eagle's plain Engine); these (cells also in test_pool_parity) slow.
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) for n in sorted(GEOMETRIES)]
)
def test_cell_and_tokens_match_sglang(name: str, tmp_path: Path) -> None:
    writer, shape, overrides = GEOMETRIES[name]
    model_dir = writer(shape)
    with cpu_engine(
        model_dir,
        plugin=False,
        capacity_bytes=CAPACITY,
        work_dir=tmp_path,
        mem_fraction_static=FRACTION,
        **overrides,
    ) as engine:
        report = engine.scheduler_report()
    assert_sizing_matches_sglang(report, model_dir, shape, overrides)
