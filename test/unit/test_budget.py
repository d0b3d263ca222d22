"""The budget model against hand-computed literals (their arithmetic in a comment, cells as
SGLang 0.5.13.post1's pool configurators compute them), hypothesis properties, and its
per-token cost against those configurators on published configs."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from harness.checkpoints.published_configs import CASES, model_config
from harness.geometry.kv_specs import AttentionKVSpec, HybridSWAKVSpec
from harness.geometry.specs import (
    attention_kv_spec,
    draft_kv_pools,
    element_bytes,
    kv_spec_from_model_config,
    runner_layer_count,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_specinit.budget import (
    BudgetError,
    BudgetInputs,
    DraftSpec,
    derive_max_running_requests,
    kv_pool_bytes,
    page_floor,
    plan_pools,
)
from sglang_specinit.report import human_bytes, plan_to_dict, render_breakdown

GIB = 1 << 30
MIB = 1 << 20

# Llama-3.1-8B-like target: 32 layers, 8 KV heads, head_dim 128, bf16.


def with_dtype(spec: AttentionKVSpec, dtype: str) -> AttentionKVSpec:
    return replace(spec, kv_dtype=dtype, element_bytes=element_bytes(dtype))


LLAMA_KV = attention_kv_spec(num_layers=32, num_kv_heads=8, head_dim=128, v_head_dim=128)
# One EAGLE layer with the target's geometry.
EAGLE_KV = attention_kv_spec(num_layers=1, num_kv_heads=8, head_dim=128, v_head_dim=128)
# DeepSeek-V3 MLA: kv_lora_rank 512 + qk_rope_head_dim 64, 61 layers.
MLA_KV = attention_kv_spec(num_layers=61, kv_lora_rank=512, qk_rope_head_dim=64)
# A Qwen3-Next-like hybrid: 48 layers, 12 of them full attention (2 KV heads, head_dim 256). The
# caller passes the full-attention count; mamba state goes in reserved_bytes.
MAMBA_KV = attention_kv_spec(num_layers=12, num_kv_heads=2, head_dim=256, v_head_dim=256)


EAGLE_DRAFT = DraftSpec(
    algorithm="EAGLE",
    kv_pools=(EAGLE_KV,),
    weight_bytes=1 * GIB,
    shared_weight_bytes=1 * GIB,
    upstream_reserved_layers=1,
)


def scenario(**overrides: object) -> BudgetInputs:
    """80 GiB free before load, f = 0.8 (budget 64 GiB), 16 GiB target weights, EAGLE draft
    with 1 GiB resident weights and a 1 GiB shared embedding, page size 1."""
    base = BudgetInputs(
        pre_load_free_bytes=80 * GIB,
        mem_fraction_static=0.8,
        target_kv=LLAMA_KV,
        target_weight_bytes=16 * GIB,
        context_len=131072,
        draft=EAGLE_DRAFT,
    )
    return replace(base, **overrides)


CELLS = {
    "mha-gqa": (LLAMA_KV, 131072),  # 8 heads * (128 + 128) * 32 layers * 2 bytes
    "eagle": (EAGLE_KV, 4096),  # 8 * 256 * 1 * 2
    "mla": (MLA_KV, 70272),  # (512 + 64) * 61 layers * 2 bytes
    # latent 70272 + indexer (128 + 128 // 128 * 4) * 61 layers * 1 byte (uint8) = 70272 + 8052
    "mla-dsa": (replace(MLA_KV, dsa_index_head_dim=128), 78324),
    # 576 * 61 * 1 + 8052: the indexer keeps its own uint8 + fp32-scale layout
    "mla-dsa-fp8": (with_dtype(replace(MLA_KV, dsa_index_head_dim=128), "float8_e4m3fn"), 43188),
    "fp8": (with_dtype(LLAMA_KV, "float8_e4m3fn"), 65536),  # 8*256*32*1
    # ROCm's fp8 is one byte like CUDA's (torch says so; no table decides that)
    "fp8-rocm": (with_dtype(LLAMA_KV, "float8_e4m3fnuz"), 65536),
    "mla-fp8": (with_dtype(MLA_KV, "float8_e5m2"), 35136),  # 576 * 61 * 1
    # 8*256*32*1 = 65536 packed two per byte -> 32768, plus scales (8*128*32*2*1) // 16 = 4096
    "fp4": (with_dtype(LLAMA_KV, "float4_e2m1fn_x2"), 36864),
    # 576*61*1 = 35136 // 2 = 17568, plus (576 // 16) * 61 * 1 = 2196
    "mla-fp4": (with_dtype(MLA_KV, "float4_e2m1fn_x2"), 19764),
    "mamba-like": (MAMBA_KV, 24576),  # 2 * 512 * 12 * 2: full-attention layers only
}


@pytest.mark.parametrize(("spec", "cell"), CELLS.values(), ids=list(CELLS))
def test_cell_bytes_per_token(spec: AttentionKVSpec, cell: int) -> None:
    assert spec.bytes_per_token() == cell


def test_element_sizes_come_from_torch_and_a_spec_without_one_is_a_budget_error() -> None:
    assert element_bytes("float8_e4m3fnuz") == element_bytes("float8_e5m2fnuz") == 1
    with pytest.raises(BudgetError, match="not a torch dtype"):
        element_bytes("no_such_dtype")
    with pytest.raises(BudgetError, match="no element size"):
        replace(LLAMA_KV, kv_dtype="int3", element_bytes=0).bytes_per_token()


# gpt-oss: 12 full-attention and 12 sliding-window layers of the same geometry
GPT_OSS_KV = attention_kv_spec(num_layers=12, num_kv_heads=8, head_dim=64, v_head_dim=64)


def test_hybrid_swa_cell_and_pool_and_an_all_swa_one() -> None:
    spec = HybridSWAKVSpec(full=GPT_OSS_KV, swa=GPT_OSS_KV, swa_full_tokens_ratio=0.8)
    # F*nf + r*S*ns = 8*128*2*12 + 0.8 * 24576 = 24576 + 19660.8
    assert spec.bytes_per_token() == pytest.approx(44236.8)
    # page 1, 1000 tokens: full (1000 + 1) * 24576 + swa (int(800) + 1) * 24576
    assert kv_pool_bytes(spec, 1000, 1) == 24_600_576 + 19_685_376
    # page 16: full (1000 + 16) * 24576 + swa (800 // 16 * 16 + 16) * 24576
    assert kv_pool_bytes(spec, 1000, 16) == 24_969_216 + 20_054_016
    # All sliding-window layers: the ratio is ignored.
    none = attention_kv_spec(num_layers=0, num_kv_heads=8, head_dim=64, v_head_dim=64)
    spec = HybridSWAKVSpec(full=none, swa=GPT_OSS_KV, swa_full_tokens_ratio=0.5)
    assert spec.bytes_per_token() == 24576  # S * ns only
    assert kv_pool_bytes(spec, 1000, 64) == (1000 + 64) * 24576


# plan_pools on the scenario as it is (page 1), then with a few fields changed (its budget: kv =
# 64 GiB - 16 GiB target - the draft's resident weights; the padding page is one page of every pool)

SMALL_KV = attention_kv_spec(num_layers=16, num_kv_heads=8, head_dim=64, v_head_dim=64)
FP32_KV = attention_kv_spec(
    num_layers=1, kv_dtype="float32", num_kv_heads=16, head_dim=128, v_head_dim=128
)
# The mamba-like target's EAGLE draft: its one full-attention layer, 2048 bytes per token.
MAMBA_DRAFT = DraftSpec("EAGLE", (replace(MAMBA_KV, num_layers=1),), upstream_reserved_layers=1)
# An EAGLE3 draft with the DeepSeek-V3 schema and num_nextn_predict_layers: 0 still allocates
# max(hidden, attention) = 1 MLA layer (1152 bytes per token); weights as EAGLE_DRAFT's.
MLA_EAGLE3 = DraftSpec("EAGLE3", (replace(MLA_KV, num_layers=1),), GIB, GIB)
# A Llama-1B-like draft: 16 layers, 8 KV heads, head_dim 64: 8 * 128 * 16 * 2 = 32768.
STANDALONE = DraftSpec("STANDALONE", (SMALL_KV,), 5 * GIB // 2, upstream_reserved_layers=16)
FROZEN_KV = DraftSpec("FROZEN_KV_MTP", weight_bytes=GIB, upstream_reserved_layers=1)


VARIANTS = {
    "as-is": (
        {},
        {
            "budget_bytes": 68_719_476_736,  # 0.8 * 80 GiB = 64 GiB
            "resident_bytes": 18_253_611_008,  # 16 GiB + 1 GiB (shared embed counted once)
            "priced_bytes_per_token": 135168,  # 131072 + 4096
            # kv = 64G - 17G - padding (131072 + 4096) = 50_465_730_560; // 135168 = 373355
            "tokens": 373355,
            "target_kv_pool_bytes": 373356 * 131072,
            "draft_kv_pool_bytes": 373356 * 4096,
            "used_bytes": 68_719_394_816,  # 17 GiB + 373356 * 135168
            "headroom_bytes": 81920,
            # needed = 17 GiB + padding 135168 + 7 tokens * 135168 = 18_254_692_352; / 80 GiB
            "min_viable_mem_fraction_static": pytest.approx(18_254_692_352 / (80 * GIB)),
            "suggested_mem_fraction_static": 0.213,
        },
    ),
    # kv = 47 GiB - page * 135168; tokens = page_floor(kv // 135168);
    # used = 17 GiB + (tokens + page) * 135168. 373340 -> 23333 pages
    "page-16": ({"page_size": 16}, {"tokens": 373328, "used_bytes": 68_717_772_800}),
    # 373292 -> 5832 pages
    "page-64": ({"page_size": 64}, {"tokens": 373248, "used_bytes": 68_713_447_424}),
    "cap": ({"max_total_tokens": 100_000}, {"tokens": 100_000}),
    "cap-paged": ({"max_total_tokens": 100_001, "page_size": 16}, {"tokens": 100_000}),
    # A cap above the profiled value changes nothing (SGLang only warns).
    "cap-above": ({"max_total_tokens": 10**9}, {"tokens": 373355}),
    # (44 GiB - 135168) // 135168
    "measured-resident": (
        {"measured_resident_bytes": 20 * GIB},
        {"resident_bytes": 20 * GIB, "tokens": 349524},
    ),
    # Per-request draft bytes charged at worst case: fixed += 1 MiB * (48 + 1);
    # (47 GiB - 135168 - 49 MiB) // 135168
    "per-request": (
        {"draft": replace(EAGLE_DRAFT, bytes_per_request=1 << 20), "max_running_requests": 48},
        {"tokens": 372975, "draft_request_bytes": 49 * (1 << 20)},
    ),
    # The full-attention layers priced, the mamba state reserved:
    # ((64 - 16 - 4) GiB - padding 26624) // 26624
    "mamba-like": (
        {"target_kv": MAMBA_KV, "draft": MAMBA_DRAFT, "reserved_bytes": 4 * GIB},
        {"tokens": 1774512},
    ),
    # EAGLE3 with its own geometry: 16 KV heads * 256 * 1 layer * 4 bytes (fp32);
    # (47 GiB - 147456) // (131072 + 16384)
    "eagle3-own-geometry": (
        {"draft": replace(EAGLE_DRAFT, algorithm="EAGLE3", kv_pools=(FP32_KV,))},
        {"draft_kv_bytes_per_token": 16384, "tokens": 342242},
    ),
    # 70272 + 1152; (47 GiB - 71424) // 71424
    "eagle3-nnpl0": (
        {"target_kv": MLA_KV, "draft": MLA_EAGLE3},
        {"priced_bytes_per_token": 71424, "tokens": 706566},
    ),
    # Multi-layer EAGLE, speculative_num_steps = 3: one 1-layer pool per step.
    # 3 * 4096; (47 GiB - 143360) // 143360; 3 pools of (352020 + 1) * 4096
    "multi-layer-eagle": (
        {"draft": replace(EAGLE_DRAFT, kv_pools=(EAGLE_KV,) * 3)},
        {
            "draft_kv_bytes_per_token": 12288,
            "tokens": 352020,
            "draft_kv_pool_bytes": 3 * 352021 * 4096,
        },
    ),
    # (64 - 16 - 2.5) GiB - 163840 padding, // 163840
    "standalone": ({"draft": STANDALONE}, {"tokens": 298187}),
    # (47 GiB - 131072) // 131072
    "frozen-kv": ({"draft": FROZEN_KV}, {"draft_kv_pool_bytes": 0, "tokens": 385023}),
    # No draft still pays the target's padding page: (48 GiB - 131072) // 131072
    "no-draft": ({"draft": None}, {"tokens": 393215}),
}


@pytest.mark.parametrize(("overrides", "expected"), VARIANTS.values(), ids=list(VARIANTS))
def test_scenario_variants(overrides: dict, expected: dict) -> None:
    plan = plan_pools(scenario(**overrides))
    assert {key: getattr(plan, key) for key in expected} == expected
    assert plan.headroom_bytes >= 0
    assert plan.tokens % plan.page_size == 0


def test_max_running_requests_derivation_and_the_user_s_cap() -> None:
    # int(373355 / 131072 * 512) = 1458 -> clamped to [2048, 4096] -> 2048; min(2048, t // 2)
    assert derive_max_running_requests(373355, 131072, None) == 2048
    assert derive_max_running_requests(1000, 4096, None) == 500  # min(2048, 1000 // 2)
    assert derive_max_running_requests(10**7, 4096, None) == 4096  # 1_250_000 clamped
    assert derive_max_running_requests(373355, 131072, 48) == 48  # user value
    assert derive_max_running_requests(373355, 131072, 48, dp_size=2) == 24  # 48 // dp
    assert derive_max_running_requests(373355, 131072, 10_000) == 2048  # capped by estimate
    assert plan_pools(scenario(max_running_requests=48)).max_running_requests == 48
    # A user's value in the plan: min(user // dp, max(min(estimate, 4096), 2048))
    assert plan_pools(scenario(max_running_requests=10_000)).max_running_requests == 2048
    tiny = scenario(max_running_requests=48, max_total_tokens=64)
    assert plan_pools(tiny).max_running_requests == 48  # min(48, 2048)


def test_the_suggested_fraction_is_the_smallest_viable_one_and_out_of_range_ones_fail() -> None:
    for fraction in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(BudgetError, match="mem-fraction-static"):
            plan_pools(scenario(mem_fraction_static=fraction))
    plan = plan_pools(scenario(mem_fraction_static=0.2))  # 16 GiB budget < 17 GiB resident
    assert plan.tokens == 0
    assert plan.target_kv_pool_bytes == plan.draft_kv_pool_bytes == 0
    assert plan.suggested_mem_fraction_static == 0.213
    assert plan_pools(scenario(mem_fraction_static=0.213)).tokens >= 7
    assert plan_pools(scenario(mem_fraction_static=0.212)).tokens < 7


# The shared breakdown (``sglang_specinit.report``): the planned/allocated table (its keys and
# types: test_report_command's plan --json check; the rules table: test_plan_cli's default table).


def test_runtime_breakdown_table_and_human_bytes() -> None:
    assert human_bytes(1.5 * GIB) == "1.50 GiB"
    assert human_bytes(-3 * (1 << 20)) == "-3.00 MiB"
    assert human_bytes(4096) == "4.00 KiB"
    assert human_bytes(12) == "12 B"
    breakdown = plan_to_dict(plan_pools(scenario()), scenario(), tp_size=1)
    # SGLang allocated less than planned: 1 GiB less target KV, 256 MiB less draft KV.
    target_pool = breakdown["target_kv_pool_bytes"] - GIB
    draft_pool = breakdown["draft_kv_pool_bytes"] - 256 * MIB
    breakdown["allocated_target_kv_pool_bytes"] = target_pool
    breakdown["allocated_draft_kv_pool_bytes"] = draft_pool
    table = render_breakdown(breakdown)
    assert table.splitlines()[0].split() == ["planned", "allocated"]
    # label -> cells (columns are two or more spaces apart)
    rows = {
        line[0]: line[1:]
        for line in (re.split(r" {2,}", x.strip()) for x in table.splitlines()[1:])
    }
    allocated_used = breakdown["resident_bytes"] + target_pool + draft_pool
    expected = {
        "target KV pool": (breakdown["target_kv_pool_bytes"], target_pool),
        "draft KV pool": (breakdown["draft_kv_pool_bytes"], draft_pool),
        "used": (breakdown["used_bytes"], allocated_used),
        "headroom": (breakdown["headroom_bytes"], breakdown["budget_bytes"] - allocated_used),
    }
    for label, (planned, allocated) in expected.items():
        assert planned != allocated, label
        assert rows[label] == [human_bytes(planned), human_bytes(allocated)], label
    # The planned used is what the plan says; the allocated one is 1.25 GiB less.
    assert breakdown["used_bytes"] - allocated_used == GIB + 256 * MIB
    # Rows the allocation does not change show the plan in both columns.
    assert rows["tokens"] == [str(breakdown["tokens"])] * 2
    assert rows["target weights"] == [human_bytes(breakdown["target_weight_bytes"])] * 2


dtypes = st.sampled_from(["bfloat16", "float16", "float32", "float8_e4m3fn", "float4_e2m1fn_x2"])


@st.composite
def attention_specs(draw: st.DrawFn, max_layers: int = 96) -> AttentionKVSpec:
    layers = draw(st.integers(1, max_layers))
    dtype = draw(dtypes)
    if draw(st.booleans()):
        return attention_kv_spec(
            num_layers=layers,
            kv_dtype=dtype,
            kv_lora_rank=draw(st.sampled_from([256, 512])),
            qk_rope_head_dim=64,
            dsa_index_head_dim=draw(st.sampled_from([0, 128])),
        )
    head_dim = draw(st.sampled_from([64, 80, 128, 256]))
    return attention_kv_spec(
        num_layers=layers,
        kv_dtype=dtype,
        num_kv_heads=draw(st.integers(1, 16)),
        head_dim=head_dim,
        v_head_dim=head_dim,
    )


@st.composite
def kv_specs(draw: st.DrawFn) -> AttentionKVSpec | HybridSWAKVSpec:
    if draw(st.integers(0, 3)) == 0:
        full = draw(attention_specs())
        full = replace(
            full, kv_lora_rank=0, dsa_index_head_dim=0, num_kv_heads=4, head_dim=64, v_head_dim=64
        )
        if draw(st.booleans()):
            full = replace(full, num_layers=0)
        swa = replace(full, num_layers=draw(st.integers(1, 48)))
        ratio = draw(st.floats(0.05, 1.0))
        return HybridSWAKVSpec(full=full, swa=swa, swa_full_tokens_ratio=ratio)
    return draw(attention_specs())


@st.composite
def budget_inputs(draw: st.DrawFn) -> BudgetInputs:
    pre = draw(st.integers(1 * GIB, 200 * GIB))
    draft = None
    if draw(st.booleans()):
        draft = DraftSpec(
            algorithm=draw(st.sampled_from(["EAGLE", "EAGLE3", "STANDALONE", "FROZEN_KV_MTP"])),
            kv_pools=tuple(draw(st.lists(kv_specs(), max_size=3))),
            weight_bytes=draw(st.integers(0, 4 * GIB)),
            shared_weight_bytes=draw(st.integers(0, 2 * GIB)),
            bytes_per_request=draw(st.sampled_from([0, 4096, 1 << 20])),
            fixed_bytes=draw(st.sampled_from([0, 64 * 4096])),
            upstream_reserved_layers=draw(st.integers(0, 4)),
        )
    return BudgetInputs(
        pre_load_free_bytes=pre,
        mem_fraction_static=draw(st.floats(0.01, 0.99)),
        target_kv=draw(kv_specs()),
        target_weight_bytes=draw(st.integers(0, pre)),
        page_size=draw(st.sampled_from([1, 16, 64])),
        context_len=draw(st.sampled_from([2048, 32768, 131072])),
        draft=draft,
        max_total_tokens=draw(st.none() | st.integers(1, 5_000_000)),
        max_running_requests=draw(st.none() | st.integers(1, 1024)),
        dp_size=draw(st.sampled_from([1, 2])),
        reserved_bytes=draw(st.sampled_from([0, GIB])),
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(budget_inputs(), attention_specs(), st.lists(attention_specs(max_layers=4), max_size=3))
def test_plan_fits_one_more_page_does_not_and_the_suggested_fraction_serves(
    inputs: BudgetInputs, target_kv: AttentionKVSpec, draft_pools: list[AttentionKVSpec]
) -> None:
    plan = plan_pools(inputs)
    assert plan.tokens % inputs.page_size == 0
    assert plan.tokens >= 0
    if plan.tokens > 0:
        assert plan.used_bytes <= plan.budget_bytes
    capped = inputs.max_total_tokens is not None and plan.tokens == (
        inputs.max_total_tokens // inputs.page_size * inputs.page_size
    )
    draft = inputs.draft
    if not capped:
        # One more page would not fit at the rule's prices: resident + fixed + tokens * price.
        fixed = inputs.reserved_bytes + inputs.target_kv.padding_bytes(inputs.page_size)
        if draft is not None:
            fixed += draft.padding_bytes(inputs.page_size) + draft.fixed_bytes
            if draft.bytes_per_request:
                worst = (
                    inputs.max_running_requests // inputs.dp_size
                    if inputs.max_running_requests is not None
                    else 4096
                )
                fixed += draft.bytes_per_request * (worst + 1)
        resident = inputs.target_weight_bytes + (draft.weight_bytes if draft else 0)
        one_more = plan.tokens + inputs.page_size
        assert resident + fixed + one_more * plan.priced_bytes_per_token > plan.budget_bytes
    # The suggested fraction always serves (the minimum of 7 tokens).
    uncapped = replace(inputs, max_total_tokens=None)
    suggested = plan_pools(uncapped).suggested_mem_fraction_static
    if suggested < 1.0:
        assert plan_pools(replace(uncapped, mem_fraction_static=suggested)).tokens >= 7
    # With plain attention pools and no per-request buffers, the price is the allocation: one
    # more page really overflows.
    if draft is not None:
        draft = replace(draft, kv_pools=tuple(draft_pools), bytes_per_request=0)
    inputs = replace(inputs, target_kv=target_kv, draft=draft, max_total_tokens=None)
    plan = plan_pools(inputs)
    bigger = plan.tokens + inputs.page_size
    used_bigger = (
        plan.resident_bytes
        + inputs.reserved_bytes
        + kv_pool_bytes(target_kv, bigger, inputs.page_size)
        + (sum(kv_pool_bytes(p, bigger, inputs.page_size) for p in draft.kv_pools) if draft else 0)
        + (draft.fixed_bytes if draft else 0)
    )
    assert used_bigger > plan.budget_bytes


# Layer counts SGLang uses for drafts (specs helpers on config-like objects)


def _draft_config(nextn: int | None, hidden: int = 1, arch: str = "LlamaForCausalLMEagle3"):
    return SimpleNamespace(
        hf_config=SimpleNamespace(architectures=[arch], num_hidden_layers=hidden),
        num_nextn_predict_layers=nextn,
        num_hidden_layers=hidden,
        num_attention_layers=hidden,
    )


def test_nnpl_zero_layer_counts_and_multi_layer_eagle_pools() -> None:
    from sglang.srt.configs.model_config import ModelConfig
    from sglang_specinit.model_facts import upstream_reserved_layers
    from sglang_specinit.planner.shipped_examples import EXAMPLES_DIR

    zero = _draft_config(nextn=0, hidden=1)
    # ModelRunner treats 0 as absent and allocates max(hidden, attention) = 1 layer ...
    assert runner_layer_count(zero, is_draft=True) == 1
    # ... while 0.5.14 takes the explicit 0 and reserves nothing.
    assert upstream_reserved_layers("EAGLE3", zero) == 0
    assert upstream_reserved_layers("EAGLE3", _draft_config(nextn=None, hidden=2)) == 2
    assert upstream_reserved_layers("EAGLE", _draft_config(nextn=1, hidden=61)) == 1
    assert runner_layer_count(_draft_config(nextn=1, hidden=61), is_draft=True) == 1
    assert runner_layer_count(_draft_config(nextn=1, hidden=61), is_draft=False) == 61
    # MiMoV2MTP / Step3p5MTP runners hold one layer whatever the config says.
    assert runner_layer_count(_draft_config(nextn=3, arch="MiMoV2MTP"), is_draft=True) == 1
    assert upstream_reserved_layers("NGRAM", zero) == 0
    # Multi-layer EAGLE pools from a real draft config: one 1-layer pool per step.
    draft = ModelConfig(
        model_path=str(EXAMPLES_DIR / "llama31-8b-eagle3" / "draft"), is_draft_model=True
    )
    pools = draft_kv_pools("EAGLE", draft, "float16", 1, 0.8, num_steps=3, multi_layer_eagle=True)
    assert [p.bytes_per_token() for p in pools] == [4096, 4096, 4096]  # 8 * 256 * 1 * 2 each
    assert draft_kv_pools("EAGLE3", draft, "float16", 2, 0.8)[0].bytes_per_token() == 2048
    assert draft_kv_pools("FROZEN_KV_MTP", draft, "float16", 1, 0.8) == ()


# The per-token cost and token count equal SGLang's own pool configurators' (real configs): KV
# heads split per TP rank, replicated below one per rank (tp 16), MLA never split.

SWA_RATIO = 0.8
KV_DTYPES = ("model", "float8_e4m3fn", "float4_e2m1fn_x2")


@pytest.mark.parametrize("tp", [1, 4, 16])
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
        pool_configurator, "is_float4_e2m1fn_x2", lambda kind: kind == torch.float4_e2m1fn_x2
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
        tokens = page_floor(int(available // spec.bytes_per_token()), page)
        assert sglang_config.max_total_num_tokens == tokens
        if isinstance(spec, HybridSWAKVSpec):
            swa = page_floor(int(tokens * SWA_RATIO), page)
            assert sglang_config.swa_max_total_num_tokens == swa
            # The pool bytes the budget model charges cover both pools SGLang will create.
            assert kv_pool_bytes(spec, tokens, page) == (
                (tokens + page) * spec.full.unpacked_bytes_per_token()
                + (swa + page) * spec.swa.unpacked_bytes_per_token()
            )
