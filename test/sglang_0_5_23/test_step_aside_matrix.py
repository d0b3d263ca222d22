"""Where sglang-specinit keeps stock's sizing on 0.5.23, and its early binding there, per layout."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import torch
from layouts import (
    DEEPSEEK_MTP,
    DSA_MTP,
    GIB,
    LLAMA70B_PP2,
    LLAMA_EAGLE3,
    QWEN3_NEXT,
    Launch,
    RunnerDouble,
    Sized,
    Weights,
    at_pp_stage,
    built_bytes,
    deepseek_mtp_weights,
    draft_config,
    example_dir,
    example_weights,
    gpt_oss_swa_cap,
    layout_matrix,
    published,
    scheduler_double,
    weights_size,
)
from sglang.srt.distributed.utils import get_pp_indices
from sglang.srt.model_executor.pool_configurator import (
    MemoryPoolConfig,
    create_memory_pool_configurator,
)
from sglang_specinit.live_sizing import DraftDescription
from sglang_specinit.phased.sizing_state import TargetSizing, sizing_active
from sglang_specinit.phased.stock_binding import stock_reserve_gap
from sglang_specinit.sglang_0_5_23 import runtime_budget
from sglang_specinit.sglang_0_5_23 import scheduler as scheduler_module
from sglang_specinit.sglang_0_5_23.launch_policy import stock_sized_reason
from sglang_specinit.sglang_0_5_23.release_shims import fused_host_names
from sglang_specinit.sglang_0_5_23.scheduler import draft_reserve_gap, fused_draft_gap, stage_sizing

# Rows of the small builds the pool bytes are fitted on (whole pages at page 1 and 64).
ROWS = (640, 1280, 1920)


@dataclass(frozen=True, kw_only=True)
class Case(Launch):
    # Why stock sizing stays: part of launch_policy's reason, or the configurator's class.
    steps_aside: str
    pp_stage: tuple[int, int] | None = None  # (rank, size): price that stage


def _eagle3_dsa_weights(tp: int, kv_heads: int) -> Weights:
    """Target: DeepSeek-V3 without its MTP layer; draft: that config's bf16 tensors."""
    size = weights_size("deepseek-v3-mtp", "target")
    target = size["total_bytes"] - size["groups"]["model.layers.61."]
    h, heads, head = 7168, 32, 128
    inter, draft_vocab, vocab = 14336, 32000, 129280
    attention = h * heads * head * 2 + 2 * h * kv_heads * head
    layer = attention + 3 * h * inter + 2 * h * h  # + fc's 3h -> h and the 2h input
    draft = 2 * (layer + h * 3 * h + draft_vocab * h)
    return Weights(target // tp, draft // tp, 2 * vocab * h // tp)


def _llama70b_last_stage() -> Weights:
    """PP 2's last stage of Llama-3.1-70B at TP 4, and the EAGLE draft (its lm_head bound)."""
    size = weights_size("llama31-70b-eagle-tp4", "target")
    embed, lm_head = (size["tensors"][n] for n in ("model.embed_tokens.weight", "lm_head.weight"))
    # The checkpoint's 80 decoder layers are alike: a stage holds its share of them.
    start, end = get_pp_indices(80, 1, 2)
    mine = (size["total_bytes"] - embed - lm_head) * (end - start) // 80 + lm_head
    draft = weights_size("llama31-70b-eagle-tp4", "draft")["total_bytes"]
    return Weights(mine // 4, draft // 4, lm_head // 4)


def _pp_deepseek_mtp_weights(rank: int, pp: int, tp: int) -> Weights:
    """A PP stage's share of DeepSeek-V3's 61 layers, and the MTP layer every stage builds."""
    w = deepseek_mtp_weights(tp)
    start, end = get_pp_indices(61, rank, pp)
    return Weights(w.target * (end - start) // 61, w.draft, w.duplicates)


def _dsa_eagle3(kv_heads: int) -> dict[str, Any]:
    """A DSA target with the llama31-8b EAGLE3 draft at V3's widths and ``kv_heads`` KV heads."""
    draft = {"hidden_size": 7168, "vocab_size": 129280, "head_dim": 128, "torch_dtype": "bfloat16"}
    return {
        **DSA_MTP,
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": lambda tmp: draft_config(
            tmp / f"eagle3-kv{kv_heads}", "llama31-8b-eagle3", num_key_value_heads=kv_heads, **draft
        ),
    }


def _hisparse(name: str, args: dict[str, Any], weights: Any) -> Case:
    hisparse = {**args, "tp_size": 8, "enable_hisparse": True}
    return Case(name, hisparse, weights, steps_aside="--enable-hisparse")


def _pd_prefill_last(name: str, args: dict[str, Any], weights: Any, **more: Any) -> Case:
    """PP 2 without SGLANG_ENABLE_PP_SPEC (PD prefill, every stage builds the draft): stage 1."""
    return Case(name, args, weights, steps_aside=PD_PREFILL, pp_stage=(1, 2), **more)


def _swa_cap(name: str, draft: Any) -> Case:
    swa_cap = "SWARequestCapPoolConfigurator"
    return Case(name, gpt_oss_swa_cap(draft), GPT_OSS_WEIGHTS, device_gib=79.0, steps_aside=swa_cap)


PD_PREFILL = "pipeline parallelism (PP 2) without SGLANG_ENABLE_PP_SPEC (PD prefill)"
GPT_OSS_WEIGHTS = partial(
    example_weights, "gpt-oss-20b-eagle3", ("model.embed_tokens.weight",), absent_costs_target=True
)
HISPARSE_MTP = "deepseek-v3.2 MTP (DSA bf16) + --enable-hisparse, TP 8"
HISPARSE_GQA = "deepseek-v3.2 (DSA) + EAGLE3 GQA draft (8 KV heads) + --enable-hisparse, TP 8"
HISPARSE_MHA = "deepseek-v3.2 (DSA) + EAGLE3 MHA draft (32 KV heads) + --enable-hisparse, TP 8"
PP_PD_PREFILL_LAST = "llama31-70b + EAGLE, TP 4 PP 2, PD prefill, last stage"
# Not a row (its own test below): 0.5.23's unified pool cannot be built at a few pages (it
# refuses a budget below one worst-case request), and the draft's rows are the fused entry's.
# Unified memory's page-major layout needs the triton backend.
UNIFIED = {**QWEN3_NEXT, "attention_backend": "triton", "enable_unified_memory": True}
CASES = [
    _hisparse(HISPARSE_MTP, DSA_MTP, partial(deepseek_mtp_weights, 8)),
    _hisparse(HISPARSE_GQA, _dsa_eagle3(8), partial(_eagle3_dsa_weights, 8, 8)),
    _hisparse(HISPARSE_MHA, _dsa_eagle3(32), partial(_eagle3_dsa_weights, 8, 32)),
    _pd_prefill_last(PP_PD_PREFILL_LAST, LLAMA70B_PP2, _llama70b_last_stage, device_gib=79.0),
    _swa_cap(
        "gpt-oss-20b + EAGLE3, radix off, --max-running-requests 16 (SWA request cap), TP 1",
        example_dir("gpt-oss-20b-eagle3", "draft"),
    ),
    _swa_cap(
        "gpt-oss-20b + EAGLE3 of 16 KV heads, radix off, --max-running-requests 16 (SWA "
        "request cap), TP 1",
        lambda tmp: draft_config(tmp / "kv16", "gpt-oss-20b-eagle3", num_key_value_heads=16),
    ),
    _pd_prefill_last(
        "deepseek-v3 MTP, TP 8 DCP 8 PP 2, PD prefill, last stage (dense MLA draft replicated)",
        {**DEEPSEEK_MTP, "tp_size": 8, "dcp_size": 8, "pp_size": 2},
        partial(_pp_deepseek_mtp_weights, 1, 2, 8),
    ),
    _pd_prefill_last(
        "llama31-70b + EAGLE, fp8 KV, bf16 draft KV, TP 4 PP 2, PD prefill, last stage",
        dict(LLAMA70B_PP2, kv_cache_dtype="fp8_e4m3", speculative_draft_kv_cache_dtype="bfloat16"),
        _llama70b_last_stage,
        device_gib=79.0,
    ),
    # Not published offline, so not rows: --enable-kv-cache-sharding (0.5.23 shards only on PD
    # prefill workers, with a draft only for GLM DSA NextN MTP; no GLM DSA config in the
    # examples); a draft on an attention-TP group of its own (a process group resolved at
    # launch, which published_layout does not build); DeepSeek-V4 layouts dsv4_sizing does not
    # price (unified KV is HIP-only, encoder replay needs V4.1, no DSpark draft config ships).
]


@dataclass
class Result(Sized):
    reason: str  # what the plugin logs when it steps aside
    stock_per_row: float  # stock's price per target (full) row, from its own configurator
    target_per_row: float  # what the target's pools grow by per full row (built)
    draft_per_row: float  # what the draft's pools grow by per full row (built)
    swa_per_row: float  # what target and draft grow by per SWA row (built; 0 without SWA)
    fit_error: int  # a fourth build against the fit
    resident_stock: int
    resident_plugin: int
    reserve_gap: str
    stock_overshoot: int  # pools built at stock's config minus what stock sized them within

    @property
    def binds(self) -> bool:
        return not self.reserve_gap

    @property
    def stock_draft_reserve(self) -> float:
        return self.stock_per_row - self.target_per_row

    @property
    def padding(self) -> float:
        """The padding page of each pool (full and SWA), which stock's rule leaves out."""
        return self.page * (self.target_per_row + self.draft_per_row + self.swa_per_row)


def _fit(target: Any, drafts: list[Any]) -> tuple[Any, int, list[Any]]:
    """(bytes of a config: (target, drafts), fitted as a + b x full + c x SWA rows on three
    builds; the fit's error at a fourth; each pool's (a, b, c))."""

    def build(full: int, swa: int) -> tuple[int, int]:
        return built_bytes(target, drafts, MemoryPoolConfig(full, 4, full, swa))

    r0, r1, r2 = ROWS
    base, more_full, more_swa = build(r0, r0), build(r1, r0), build(r0, r1)
    coef = [
        (b, (f - b) / (r1 - r0), (s - b) / (r1 - r0))
        for b, f, s in zip(base, more_full, more_swa, strict=True)
    ]

    def at(full: int, swa: int) -> tuple[int, ...]:
        return tuple(round(b + cf * (full - r0) + cs * (swa - r0)) for b, cf, cs in coef)

    error = max(abs(x - y) for x, y in zip(build(r2, r1), at(r2, r1), strict=True))
    return lambda config: at(*_rows(config)), error, coef


def _rows(config: Any) -> tuple[int, int]:
    """(full rows, SWA rows) of a pool config (its one count where it has no SWA split)."""
    full = int(config.full_max_total_num_tokens or config.max_total_num_tokens)
    return full, int(config.swa_max_total_num_tokens or full)


def evaluate(case: Case, tmp: Path) -> Result:
    layout = case.publish(tmp)
    target, drafts = layout.target, list(layout.drafts)
    if case.pp_stage is not None:
        at_pp_stage(target, *case.pp_stage)
    configurator = create_memory_pool_configurator(target)
    page = int(target.page_size)
    # launch_policy reads the scheduler's ServerArgs and model config only: a namespace.
    scheduler = SimpleNamespace(server_args=layout.server_args, model_config=target.model_config)
    pp = case.pp_stage[1] if case.pp_stage else 1
    with mock.patch.dict(os.environ):
        os.environ.pop("SGLANG_ENABLE_PP_SPEC", None)  # the PP cell is a PD prefill launch
        reason = stock_sized_reason(scheduler, pp) or type(configurator).__name__

    # Stock's price per full row, from its own answer at two budgets far apart (so far that
    # its page rounding moves the quotient by well under a millibyte).
    big = 1 << 60
    t1 = configurator.calculate_pool_sizes(big, page).max_total_num_tokens
    t2 = configurator.calculate_pool_sizes(2 * big, page).max_total_num_tokens
    stock_per_row = big / (t2 - t1)

    bytes_of, fit_error, coef = _fit(target, drafts)
    (_, target_full, target_swa), (_, draft_full, draft_swa) = coef

    w, budget = case.weights(), case.budget
    resident_stock = w.target + w.draft + w.duplicates
    stock_config = configurator.calculate_pool_sizes(budget - resident_stock, page)
    stock_t, stock_d = bytes_of(stock_config)
    fixed = int(getattr(configurator, "_fixed_overhead_bytes", 0) or 0)
    stock_used = fixed + w.stock_peak(stock_t, stock_d)

    # The scheduler's own vetting (bind_where_stock_sizes): declined, stock's sizing stays.
    gap = draft_reserve_gap(target, drafts, drafts)
    resident_plugin = resident_stock if gap else w.target + w.draft
    plugin_config = configurator.calculate_pool_sizes(budget - resident_plugin, page)
    plugin_used = stock_used if gap else fixed + resident_plugin + sum(bytes_of(plugin_config))

    # Per full row: a SWA pool grows with the full one under a ratio, not under the cap.
    full, swa = _rows(stock_config)
    capped = type(configurator).__name__ == "SWARequestCapPoolConfigurator"
    scale = 0.0 if capped or not target.is_hybrid_swa else swa / full
    return Result(
        cell=case,
        page=page,
        reason=reason,
        stock_per_row=stock_per_row,
        target_per_row=target_full + target_swa * scale,
        draft_per_row=draft_full + draft_swa * scale,
        swa_per_row=target_swa + draft_swa,
        fit_error=fit_error,
        budget=budget,
        resident_stock=resident_stock,
        resident_plugin=resident_plugin,
        reserve_gap=gap,
        stock_tokens=int(stock_config.max_total_num_tokens),
        plugin_tokens=int(plugin_config.max_total_num_tokens),
        stock_used=stock_used,
        plugin_used=plugin_used,
        stock_overshoot=fixed + stock_t + stock_d - (budget - resident_stock),
    )


matrix = layout_matrix(
    CASES, evaluate, "SPECINIT_STEP_ASIDE_TABLE",
    ("stock reserve for the draft B/row", "draft allocates B/row",
     "resident at profiling stock -> plugin", "binds early"),
    lambda r: (f"{r.stock_draft_reserve:,.1f}", f"{r.draft_per_row:,.1f}",
               f"{r.resident_stock / GIB:,.3f} -> {r.resident_plugin / GIB:,.3f} GiB",
               "yes" if r.binds else "no: " + r.reserve_gap.split(":")[0]),
)  # fmt: skip


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_steps_aside_and_never_worse_than_stock(matrix, name) -> None:
    r = matrix[name]
    assert r.cell.steps_aside in r.reason
    # The fit the budget use is read from predicts a fourth build of 0.5.23's pools.
    assert r.fit_error <= 1
    # Binds only where stock's reserve (read to within a millibyte: its page rounding at 2^60
    # bytes) covers the built draft.
    if r.draft_per_row > r.stock_draft_reserve + 1e-3:
        assert not r.binds, r.reserve_gap
    assert r.plugin_tokens >= r.stock_tokens
    assert r.resident_plugin <= r.resident_stock
    if r.stock_used > r.budget:
        assert r.plugin_used <= r.stock_used, r.reserve_gap or "bound early"
    if not r.binds:
        # Stock's sizing untouched: the same config, the same bytes.
        assert (r.plugin_tokens, r.plugin_used) == (r.stock_tokens, r.stock_used)
        return
    assert r.resident_stock - r.resident_plugin == r.cell.weights().duplicates
    if r.stock_used <= r.budget + r.padding:
        # Stock's rule leaves each pool's padding page out: all binding may add.
        assert r.plugin_used <= r.budget + r.padding


def test_hisparse_and_pp_drafts_bind_where_the_reserve_covers_them(matrix) -> None:
    # A HiSparse MTP draft is reserved as it allocates.
    r = matrix[HISPARSE_MTP]
    assert r.draft_per_row == pytest.approx(r.stock_draft_reserve, abs=1e-3)
    assert r.binds and r.plugin_tokens > r.stock_tokens
    # A HiSparse MHA EAGLE3 draft on a DSA target is under-reserved.
    mha, gqa = matrix[HISPARSE_MHA], matrix[HISPARSE_GQA]
    assert mha.draft_per_row > mha.stock_draft_reserve
    assert gqa.draft_per_row < gqa.stock_draft_reserve
    # Stock's pools overshoot what it sized them within by the shortfall over its rows.
    shortfall = (mha.draft_per_row - mha.stock_draft_reserve) * mha.stock_tokens
    assert mha.stock_overshoot >= shortfall
    assert "geometry of its own" in mha.reserve_gap and "geometry of its own" in gqa.reserve_gap
    # The PP last stage binds the lm_head where the reserve covers the draft.
    last = matrix[PP_PD_PREFILL_LAST]
    assert last.draft_per_row <= last.stock_draft_reserve + 1e-3
    assert last.binds, last.reserve_gap


def test_unified_memory_keeps_stock_and_binds_a_draft_fused_only_into_full(tmp_path) -> None:
    layout = published(UNIFIED, tmp_path / "unified")
    target, drafts = layout.target, layout.drafts
    scheduler = SimpleNamespace(server_args=layout.server_args, model_config=target.model_config)
    assert "--enable-unified-memory" in stock_sized_reason(scheduler, 1)
    fused = target.fused_entry_bytes("full")
    assert fused is not None
    assert create_memory_pool_configurator(target)._cell_size == fused
    d = int(target.spec_aux_config.eagle_draft_num_layers or 0)
    layer_gap = stock_reserve_gap(
        target, drafts, d, [int(k.layer_info.num_effective_layers) for k in drafts]
    )
    assert "reserves 0 draft layer" in layer_gap  # what decided before the fused check
    assert fused_draft_gap(target) == ""
    # The draft's own embed and lm_head, at the target's shape until bound (TP 1).
    hf = target.model_config.hf_config
    element = torch.empty((), dtype=target.model_config.dtype).element_size()
    duplicates = 2 * hf.vocab_size * hf.hidden_size * element
    print(
        f"\nunified memory: stock {fused:,} B/row (fused entry, target + draft); binds "
        f"{duplicates / (1 << 20):,.0f} MiB of duplicates first: +{duplicates // fused:,} rows "
        "at stock's price"
    )

    plain = published({**UNIFIED, "enable_unified_memory": False}, tmp_path / "plain")
    assert fused_draft_gap(plain.target) is None
    # The scheduler's vetting of a fresh launch binds it through the fused check.
    scheduler = scheduler_double(published(UNIFIED, tmp_path / "bind"))
    runner = scheduler.tp_worker.model_runner
    with mock.patch.object(scheduler_module, "bind_under_stock_sizing") as bind:
        scheduler_module.bind_where_stock_sizes(scheduler)
    (_, runners, gap), _ = bind.call_args
    assert runners == scheduler.draft_worker.draft_worker.draft_runners
    assert gap == ""  # the layer check alone says "stock reserves 0 draft layer(s)"
    assert "kv_cache_configurator" not in runner.__dict__  # put back as it was

    # A draft fused beyond the full entry is not vouched for.
    hosts = fused_host_names()
    assert "full" in hosts and len(hosts) > 1  # 0.5.23 registers more host kinds

    def fused_entries(entries: dict[str, int]) -> Any:  # test double: a chosen set of sub-pools
        return SimpleNamespace(fused_entry_bytes=entries.get)

    other = next(h for h in hosts if h != "full")
    assert fused_draft_gap(fused_entries({})) is None
    assert fused_draft_gap(fused_entries({"full": 4096})) == ""
    reason = fused_draft_gap(fused_entries({"full": 4096, other: 512}))
    assert reason and other in reason


AVAILABLE = 20 * GIB  # test double's reading of what profiling leaves for the pools


def _run_hook(layout: Any, sizing: Any, stock: Any, profile: Any = None) -> Any:
    """The plugin's sizing hook on the target, ``sizing`` active, profiling a test double."""
    target = layout.target
    target.model = torch.nn.Module()  # test double: the target's weights are not loaded
    profile = profile or (lambda self, pre: AVAILABLE)
    with (
        mock.patch.object(type(target), "_profile_available_bytes", profile),
        sizing_active(sizing),
    ):
        return runtime_budget.resolve_memory_pool_config(stock, target, 79.0)


def test_a_swa_request_cap_launch_keeps_the_duplicates_where_stock_reserve_falls_short(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kv16 = draft_config(tmp_path / "eagle3-kv16", "gpt-oss-20b-eagle3", num_key_value_heads=16)
    layout = published(gpt_oss_swa_cap(kv16), tmp_path)
    scheduler = scheduler_double(layout)
    sizing = stage_sizing(scheduler)
    stock_calls = []

    def stock(kvc: Any, pre_model_load_memory: float) -> str:
        stock_calls.append(kvc)
        return "stock's config"

    with caplog.at_level(logging.WARNING):
        assert _run_hook(layout, sizing, stock) == "stock's config"
    assert stock_calls == [layout.target] and sizing.plan is None
    binding = getattr(scheduler, "_specinit_early_binding", None)
    assert binding is not None, "the fallback ran no vetted binding"
    assert not binding.bound and "a geometry of its own" in binding.skipped
    (line,) = [r.getMessage() for r in caplog.records if "[specinit]" in r.getMessage()]
    assert "SWARequestCapPoolConfigurator pools are not priced" in line
    assert "not bound early (the draft stores KV in a geometry of its own" in line


def test_a_priced_launch_binds_before_its_pool_is_profiled(tmp_path: Path) -> None:
    """Llama-3.1-8B + EAGLE3: the hook prices the pools, then binds (once), then profiles."""
    layout = published(LLAMA_EAGLE3, tmp_path)
    (draft,) = layout.drafts
    runner = RunnerDouble(draft)
    events: list[str] = []
    sizing = TargetSizing(
        draft=DraftDescription("EAGLE3", weight_runners=[runner], pool_runners=[runner])
    )
    sizing.bind_early = lambda priced: events.append(f"bind priced={priced}") or ""

    def profile(self: Any, pre: float) -> int:
        events.append("profile")
        return AVAILABLE

    no_stock = mock.Mock(side_effect=AssertionError("the hook fell back on stock sizing"))
    config = _run_hook(layout, sizing, no_stock, profile)
    assert events == ["bind priced=True", "profile"]
    assert sizing.plan is not None and config.max_total_num_tokens == sizing.plan.tokens
