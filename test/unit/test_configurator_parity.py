"""The budget model's per-token cost equals SGLang's own pool configurators, on real configs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from harness.checkpoints.published_configs import CASES, model_config
from harness.geometry import kv_specs
from harness.geometry.specs import kv_spec_from_model_config, runner_layer_count
from sglang_specinit import budget

SWA_RATIO = 0.8


KV_DTYPES = ("model", "float8_e4m3fn", "float4_e2m1fn_x2")


@pytest.mark.parametrize("tp", [1, 4])
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_cell_size_and_tokens_equal_sglang(
    case: str, kv_dtype: str, tp: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.model_executor import pool_configurator
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    config = model_config(CASES[case](tmp_path))
    dtype = config.dtype if kv_dtype == "model" else getattr(torch, kv_dtype)
    monkeypatch.setattr(pool_configurator, "get_attention_tp_size", lambda: tp)
    monkeypatch.setattr(
        pool_configurator,
        "is_float4_e2m1fn_x2",
        lambda candidate: candidate == torch.float4_e2m1fn_x2,
    )
    layers = runner_layer_count(config, is_draft=False)
    use_mla = config.attention_arch == AttentionArch.MLA
    # The ModelRunner attributes SGLang's configurators read.
    runner = SimpleNamespace(
        model_config=config,
        kv_cache_dtype=dtype,
        num_effective_layers=layers,
        use_mla_backend=use_mla,
        is_hybrid_swa=config.is_hybrid_swa,
        server_args=type("Args", (), {"swa_full_tokens_ratio": SWA_RATIO})(),
        spec_algorithm=SpeculativeAlgorithm.NONE,
        is_draft_worker=False,
        mambaish_config=None,
        start_layer=0,
        end_layer=layers,
    )
    configurator = pool_configurator.create_memory_pool_configurator(runner)
    spec = kv_spec_from_model_config(
        config,
        dtype,
        attn_tp_size=tp,
        num_layers=layers,
        swa_full_tokens_ratio=SWA_RATIO,
        use_mla=use_mla,
    )
    assert spec.bytes_per_token() == configurator._cell_size

    for page in (1, 16, 64):
        available = 7 * (1 << 30) + 12345
        sglang_config = configurator.calculate_pool_sizes(available, page)
        tokens = budget.page_floor(int(available // spec.bytes_per_token()), page)
        assert sglang_config.max_total_num_tokens == tokens
        if isinstance(spec, kv_specs.HybridSWAKVSpec):
            swa = budget.page_floor(int(tokens * SWA_RATIO), page)
            assert sglang_config.swa_max_total_num_tokens == swa
            # The pool bytes the budget model charges cover both pools SGLang will create.
            assert budget.kv_pool_bytes(spec, tokens, page) == (
                (tokens + page) * spec.full.unpacked_bytes_per_token()
                + (swa + page) * spec.swa.unpacked_bytes_per_token()
            )
