"""Every pool is priced at what SGLang's pool classes really allocate for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints.published_configs import CASES, model_config, qwen3_next_config_dir
from harness.cpu_doubles.unloaded_runner import (
    DERIVED_ATTRS,
    attention_tp,
    fp4_pools_as_on_cuda,
    unloaded_runner,
)
from harness.geometry.specs import kv_spec_for_runner
from sglang_specinit import budget
from sglang_specinit.model_facts import runner_layer_count
from sglang_specinit.sglang_0_5_13.pool_probe import measure_kv_pool

ALL_CASES = {**CASES, "qwen3-next-gdn": qwen3_next_config_dir}
KV_DTYPES = ("model", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float4_e2m1fn_x2")
# Every dtype on one model per pool family; the model dtype and CUDA's fp8 on the rest.
FULL_DTYPE_CASES = ("llama31-8b", "deepseek-v3-mla", "gpt-oss-20b-swa")
# Not FP4 on SWA pools: those store it as float4_e2m1fn_x2 itself, which torch cannot allocate on
# CPU ("fill_cpu" not implemented).
FP4_SWA = ("gpt-oss-20b-swa", "float4_e2m1fn_x2")


def _matrix() -> list[Any]:
    rows = []
    for case in sorted(ALL_CASES):
        for kv_dtype in KV_DTYPES if case in FULL_DTYPE_CASES else KV_DTYPES[:2]:
            if (case, kv_dtype) == FP4_SWA:
                continue
            for tp in (1, 4):
                rows.append(pytest.param(case, kv_dtype, tp, False, id=f"{case}-{kv_dtype}-tp{tp}"))
    # A draft read from the target checkpoint (its one MTP layer).
    drafts = ("deepseek-v3-mla", "qwen3-next-gdn")
    return rows + [pytest.param(case, "model", 1, True, id=f"{case}-draft") for case in drafts]


SWA_RATIO = 0.8


def _server_args(config_dir: Path, page: int) -> Any:
    from sglang_specinit.planner.releases import installed_replay

    flags = f"--device cpu --page-size {page} --swa-full-tokens-ratio {SWA_RATIO}"
    return installed_replay().parse_launch(["--model-path", str(config_dir), *flags.split()])


@pytest.mark.parametrize(("case", "kv_dtype", "tp", "draft"), _matrix())
def test_planner_price_equals_what_sglang_allocates(
    case: str, kv_dtype: str, tp: int, draft: bool, tmp_path: Path
) -> None:
    import torch

    config_dir = ALL_CASES[case](tmp_path)
    for page in (64,) if case == "deepseek-v32-dsa" else (1, 16):  # DSA needs 64 (outside ROCm)
        server_args = _server_args(config_dir, page)
        with attention_tp(tp), fp4_pools_as_on_cuda():
            config = model_config(config_dir, is_draft_model=draft)
            dtype = config.dtype if kv_dtype == "model" else getattr(torch, kv_dtype)
            layers = runner_layer_count(config, is_draft=draft)
            runner = unloaded_runner(
                config, server_args, kv_cache_dtype=dtype, num_layers=layers, is_draft=draft
            )
            live = runner.model_config
            ratio_applies = bool(live.is_hybrid_swa) and bool(
                getattr(live, "full_attention_layer_ids", None)
            )
            measured = measure_kv_pool(runner, SWA_RATIO, ratio_applies)
            spec = kv_spec_for_runner(runner)
        assert not draft or (layers == 1 and measured.full_bytes_per_token > 0)
        assert spec.bytes_per_token() == measured.bytes_per_token()
        for tokens in (page * 37, page * 1000):
            assert budget.kv_pool_bytes(spec, tokens, page) == measured.pool_bytes(tokens, page)
    if (case, kv_dtype, tp) == ("deepseek-v32-dsa", "float8_e4m3fn", 1):
        # DSA's fp8 cache is priced at its stored layout (656 B a layer, plus its indexer's).
        index_bytes = (128 + 128 // 128 * 4) * layers
        assert measured.full_bytes_per_token == 656 * layers + index_bytes


@pytest.mark.cpu_engine
@pytest.mark.timeout(300)
def test_unloaded_runner_matches_a_live_runner(tiny_target: Path) -> None:
    """The test double derives the pool-relevant attributes as a real ModelRunner does."""
    import sys

    from harness.launch.engine import cpu_env
    from harness.launch.plugin_probe import run_probe

    code = f"""
import json, sys, torch
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
from sglang.srt.server_args import ServerArgs
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.server_args import PortArgs, set_global_server_args_for_scheduler
from harness.cpu_doubles.unloaded_runner import DERIVED_ATTRS, unloaded_runner
from sglang_specinit.model_facts import runner_layer_count

args = ServerArgs(model_path={str(tiny_target)!r}, device="cpu", attention_backend="torch_native",
                  disable_cuda_graph=True, disable_piecewise_cuda_graph=True,
                  grammar_backend="none", mem_fraction_static=0.5, page_size=16)
set_global_server_args_for_scheduler(args)
worker = TpModelWorker(server_args=args, gpu_id=0, tp_rank=0, moe_ep_rank=0, pp_rank=0,
                       attn_cp_rank=0, moe_dp_rank=0, dp_rank=None,
                       nccl_port=PortArgs.init_new(args).nccl_port)
live = worker.model_runner
double = unloaded_runner(ModelConfig.from_server_args(args), args,
                         kv_cache_dtype=live.kv_cache_dtype,
                         num_layers=runner_layer_count(live.model_config, is_draft=False))
print(sys.argv[-1] + json.dumps({{n: [repr(getattr(live, n)), repr(getattr(double, n))]
                                  for n in DERIVED_ATTRS}}))
"""
    pairs = run_probe(sys.executable, code, [], cpu_env(plugin=False), timeout_s=280)
    assert set(pairs) == set(DERIVED_ATTRS)
    assert {n: live for n, (live, _) in pairs.items()} == {
        n: double for n, (_, double) in pairs.items()
    }
