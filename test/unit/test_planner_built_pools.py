"""The 0.5.13.x planner prices every pool by building it (the server's function), and the
model-geometry pricing it replaced agrees with what it builds on every shipped example."""

from __future__ import annotations

import pytest
from harness.geometry.kv_specs import sized_by_target
from harness.geometry.specs import draft_extra_bytes, draft_kv_pools, kv_spec_from_model_config
from sglang_specinit.budget import MeasuredKVSpec
from sglang_specinit.model_facts import runner_layer_count
from sglang_specinit.planner.cli import _device, _planner_parser
from sglang_specinit.planner.replay import build_model_config, cuda_quantization_names
from sglang_specinit.planner.shipped_examples import example_refusal, list_examples, load_example
from sglang_specinit.sglang_0_5_13 import pool_probe
from sglang_specinit.sglang_0_5_13.planner_replay import REPLAY

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.mark.parametrize("example", list_examples())
def test_built_prices_equal_the_geometry(example: str, monkeypatch) -> None:
    from sglang.srt.configs.model_config import ModelConfig

    refusal = example_refusal(example, REPLAY)
    if refusal is not None:
        pytest.skip(f"not planned by this release's replay: {refusal}")
    built_runners = []
    measure = pool_probe.measure_kv_pool

    def counting(runner, *split):
        built_runners.append(runner)
        return measure(runner, *split)

    monkeypatch.setattr(pool_probe, "measure_kv_pool", counting)
    with cuda_quantization_names():
        # The example's launch resolved for its GPU, as ``plan --example`` resolves it.
        options, flags = _planner_parser().parse_known_args(["--example", example])
        device = _device(options, load_example(example))
        launch = REPLAY.resolve(
            REPLAY.parse_launch([*load_example(example).launch_args, *flags]), device
        )
        prices = REPLAY.pool_prices(launch, device)
        # The same launch priced from the model geometry, as the planner priced it before.
        args = launch.args
        target_mc = launch.target_model_config
        t_dtype = REPLAY.kv_dtype(launch, target_mc, is_draft=False, target_kv_dtype=None)
        target = kv_spec_from_model_config(
            target_mc,
            t_dtype,
            attn_tp_size=launch.attn_tp_size,
            num_layers=runner_layer_count(target_mc, is_draft=False),
            swa_full_tokens_ratio=args.swa_full_tokens_ratio,
            server_args=launch.mla_server_args,
        )
        draft_mc = build_model_config(
            ModelConfig.from_server_args,
            launch.config_source,
            model_path=args.speculative_draft_model_path or args.model_path,
            is_draft_model=True,
        )
        d_dtype = REPLAY.kv_dtype(launch, draft_mc, is_draft=True, target_kv_dtype=t_dtype)
        common = dict(
            attn_tp_size=launch.attn_tp_size,
            swa_full_tokens_ratio=args.swa_full_tokens_ratio,
            num_steps=int(args.speculative_num_steps or 1),
            multi_layer_eagle=bool(args.enable_multi_layer_eagle),
        )
        algorithm = args.speculative_algorithm
        pools = draft_kv_pools(
            algorithm, draft_mc, d_dtype, server_args=launch.mla_server_args, **common
        )
        extra = draft_extra_bytes(
            algorithm, draft_mc, target_mc, d_dtype, page_size=int(args.page_size), **common
        )
        draft_pools = tuple(sized_by_target(p, target) for p in pools)
    # Built: one pool for the target and one per distinct draft runner, by the server's probe.
    assert len(built_runners) == 2
    assert isinstance(prices.target_kv, MeasuredKVSpec)
    page = int(launch.args.page_size)
    for tokens in (page * 64, page * 4096, page * 100_003):
        assert prices.target_kv.pool_bytes(tokens, page) == target.pool_bytes(tokens, page)
        assert [p.pool_bytes(tokens, page) for p in prices.draft_pools] == [
            p.pool_bytes(tokens, page) for p in draft_pools
        ]
    assert (prices.draft_request_bytes, prices.draft_fixed_bytes) == extra
