"""Never worse than stock 0.5.23, over a layout matrix of published launches."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from harness.checkpoints import gemma4_mtp, mimo_v2_mtp
from layouts import (
    DEEPSEEK_MTP,
    DSA_MTP,
    GIB,
    LLAMA_EAGLE3,
    QWEN3_NEXT,
    SPEC_CHAIN,
    Launch,
    Sized,
    Weights,
    built_bytes,
    deepseek_mtp_weights,
    example_launch,
    example_weights,
    layout_matrix,
    nnpl0_draft,
)
from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
from sglang.srt.model_executor.pool_configurator import (
    MemoryPoolConfig,
    create_memory_pool_configurator,
)
from sglang_specinit.budget import BudgetInputs, DraftSpec, kv_pool_bytes, page_floor, plan_pools
from sglang_specinit.sglang_0_5_23 import runtime_budget
from sglang_specinit.sglang_0_5_23.runtime_budget import price_configurators
from sglang_specinit.sglang_0_5_23.scheduler import draft_reserve_gap

# Sizes every price is checked at, built directly (the probe builds 2 and 4 pages).
PAGES_CHECKED = (5, 10)  # x 0.8 (the default SWA ratio) stays whole
# A pool's constant pointer / stride tables, left out of its price (SGLang's 1 - f share).
BOOKKEEPING_BYTES = 16 << 10


@dataclass(frozen=True, kw_only=True)
class Cell(Launch):
    draft_runners: int = 1
    fixed_pool_tokens: int | None = None  # frozen-KV MTP: its stand-in pool
    tags: tuple[str, ...] = ()


def _example(example: str, algorithm: str, tp: int, *shared: str, **args: Any) -> tuple[Any, Any]:
    """(a shipped example's launch at TP ``tp``, its weights; ``shared``: the bound tensors)."""
    launch = example_launch(example, algorithm, tp_size=tp, **args)
    return launch, partial(example_weights, example, shared, tp)


def _deepseek_tp8(name: str, tag: str = "", base: dict = DEEPSEEK_MTP, **args: Any) -> Cell:
    """DeepSeek-V3's MTP launch (``base``; or V3.2's DSA config) at TP 8, with ``args``."""
    tags = (tag,) if tag else ()
    return Cell(name, {**base, "tp_size": 8, **args}, partial(deepseek_mtp_weights, 8), tags=tags)


def _tiny(name: str, more: dict[str, Any], **args: Any) -> Cell:
    """An EAGLE launch of a tiny config, on a quarter GiB at fraction 0.5 (``more``: Cell's)."""
    launch = {"speculative_algorithm": "EAGLE", **args, **SPEC_CHAIN}
    tiny = partial(Weights, 8 << 20, 2 << 20, 4 << 20)
    return Cell(name, launch, tiny, device_gib=0.25, mem_fraction_static=0.5, **more)


EMBED = "model.embed_tokens.weight"
EAGLE3_WEIGHTS = partial(example_weights, "llama31-8b-eagle3", (EMBED,))
CELLS = [
    Cell(
        "llama31-8b+eagle3 (GQA, draft geometry of its own), TP 1",
        LLAMA_EAGLE3,
        EAGLE3_WEIGHTS,
        device_gib=79.0,
        tags=("eagle3",),
    ),
    Cell(
        "llama31-8b+eagle3, num_nextn_predict_layers 0, TP 1",
        {**LLAMA_EAGLE3, "speculative_draft_model_path": nnpl0_draft},
        EAGLE3_WEIGHTS,
        device_gib=79.0,
        tags=("nnpl0",),
    ),
    Cell(
        "llama31-70b+eagle (GQA), TP 4",
        *_example("llama31-70b-eagle-tp4", "EAGLE", 4, EMBED, "lm_head.weight"),
        device_gib=79.0,
    ),
    Cell("qwen3-moe+eagle3 (GQA MoE), TP 4", *_example("qwen3-moe-eagle3", "EAGLE3", 4, EMBED)),
    Cell(
        "gpt-oss-20b+eagle3 (hybrid SWA target), TP 1",
        *_example("gpt-oss-20b-eagle3", "EAGLE3", 1, EMBED, attention_backend="triton"),
        device_gib=79.0,
    ),
    _deepseek_tp8("deepseek-v3 MTP, no draft path (MLA bf16), TP 8, page 64", "mla", page_size=64),
    _deepseek_tp8(
        "deepseek-v3 MTP, dp-attention (dp 8 x tp 8)", dp_size=8, enable_dp_attention=True
    ),
    _deepseek_tp8("deepseek-r1/v3 MTP, TP 8 DCP 8 (dense MLA, #39799)", "dcp-dense", dcp_size=8),
    _deepseek_tp8("deepseek-v3.2 MTP (DSA bf16), TP 8", "dsa", DSA_MTP, kv_cache_dtype="bfloat16"),
    _deepseek_tp8(
        "deepseek-v3.2 MTP (DSA fp8_e4m3), TP 8", "dsa-fp8", DSA_MTP, kv_cache_dtype="fp8_e4m3"
    ),
    _deepseek_tp8(
        "deepseek-v3.2 MTP (DSA fp8_e4m3), TP 8 DCP 8",
        "dsa-dcp",
        DSA_MTP,
        dcp_size=8,
        kv_cache_dtype="fp8_e4m3",
    ),
    Cell(
        "qwen3-next NEXTN, no draft path (hybrid GDN), TP 4",
        {**QWEN3_NEXT, "tp_size": 4},
        partial(Weights, 40 * GIB, 700 << 20, 600 << 20),  # 80B checkpoint / 4, one MTP block
        tags=("gdn-pathless",),
    ),
    _tiny(
        "MiMo-V2 multi-layer EAGLE (tiny config), 3 runners",
        model_path=lambda tmp: str(mimo_v2_mtp.tiny_mimo_v2_target()),
        trust_remote_code=True,
        more={"draft_runners": 3, "tags": ("multi-layer",)},
    ),
    _tiny(
        "Gemma 4 + assistant, FROZEN_KV_MTP (tiny config)",
        model_path=lambda tmp: str(gemma4_mtp.tiny_gemma4_target()),
        speculative_draft_model_path=lambda tmp: str(gemma4_mtp.tiny_gemma4_assistant()),
        attention_backend="triton",
        more={"fixed_pool_tokens": 64},
    ),
]


@dataclass
class CellResult(Sized):
    target_price: Any
    draft_prices: tuple[Any, ...]
    stock_cell: float
    stock_reserved_layers: int | None
    allocated: tuple[int, int]  # every pool, built by _init_pools at PAGES_CHECKED
    priced: tuple[int, int]
    # Why stock_binding would not bind ("" if it does); stock's tokens with it bound early.
    reserve_gap: str
    bound_tokens: int
    bound_used: int  # both weights and the pools at bound_tokens

    @property
    def allocated_per_row(self) -> float:
        """What the pools SGLang built grew by per target row between the two checked sizes."""
        small, large = self.allocated
        return (large - small) / ((PAGES_CHECKED[1] - PAGES_CHECKED[0]) * self.page)

    @property
    def priced_per_row(self) -> float:
        return sum(p.bytes_per_token() for p in (self.target_price, *self.draft_prices))


def _pools_bytes(prices: Any, tokens: int, page: int) -> int:
    return sum(kv_pool_bytes(spec, tokens, page) for spec in prices)


def evaluate(cell: Cell, tmp: Path) -> CellResult:
    layout = cell.publish(tmp, draft_runners=cell.draft_runners)
    target = layout.target
    page = int(target.page_size)
    fixed = [(kvc, cell.fixed_pool_tokens) for kvc in layout.drafts if cell.fixed_pool_tokens]
    pool_drafts = [] if cell.fixed_pool_tokens else layout.drafts
    target_price, draft_prices, fixed_bytes = price_configurators(target, pool_drafts, fixed)
    prices = (target_price, *draft_prices)

    # Two more sizes, built directly: the price must predict them (to the bookkeeping).
    allocated, priced = [], []
    for pages in PAGES_CHECKED:
        full = pages * page
        swa = page_floor(int(full * target_price.swa_full_tokens_ratio), page)
        config = MemoryPoolConfig(full, 1, full, swa if target_price.ratio_applies else full)
        allocated.append(sum(built_bytes(kvc, [], config)[0] for kvc in [target, *pool_drafts]))
        priced.append(_pools_bytes(prices, full, page))

    configurator = create_memory_pool_configurator(target)
    w, free = cell.weights(), int(cell.device_gib * GIB)

    def tokens(resident: int) -> int:
        return configurator.calculate_pool_sizes(cell.budget - resident, page).max_total_num_tokens

    plan = plan_pools(
        BudgetInputs(
            pre_load_free_bytes=free,
            mem_fraction_static=cell.mem_fraction_static,
            target_kv=target_price,
            target_weight_bytes=w.target,
            page_size=page,
            context_len=target.model_config.context_len,
            draft=DraftSpec(
                algorithm=layout.server_args.speculative_algorithm,
                kv_pools=draft_prices,
                weight_bytes=w.draft,
                fixed_bytes=fixed_bytes,
                shared_weight_bytes=w.duplicates,
            ),
            max_running_requests=layout.server_args.max_running_requests,
            measured_resident_bytes=w.target + w.draft,
        )
    )
    # Stock: SGLang's own configurator on what both models (duplicates included) leave.
    stock_tokens = tokens(sum(w))
    target_pool = kv_pool_bytes(target_price, stock_tokens, page)
    stock_drafts = _pools_bytes(draft_prices, stock_tokens, page)
    bound = tokens(w.target + w.draft)
    return CellResult(
        cell=cell,
        page=page,
        budget=cell.budget,
        stock_tokens=stock_tokens,
        stock_used=fixed_bytes + w.stock_peak(target_pool, stock_drafts),
        plugin_tokens=plan.tokens,
        plugin_used=w.target + w.draft + _pools_bytes(prices, plan.tokens, page) + fixed_bytes,
        target_price=target_price,
        draft_prices=draft_prices,
        stock_cell=float(configurator._cell_size),
        stock_reserved_layers=target.spec_aux_config.eagle_draft_num_layers,
        allocated=tuple(allocated),
        priced=tuple(priced),
        # The scheduler's own vetting of an early binding (bind_where_stock_sizes).
        reserve_gap=draft_reserve_gap(target, layout.drafts, layout.drafts),
        bound_tokens=bound,
        bound_used=w.target + w.draft + _pools_bytes(prices, bound, page),
    )


matrix = layout_matrix(
    CELLS, evaluate, "SPECINIT_TEST_MATRIX_TABLE",
    ("stock reserve B/row", "allocated B/row", "priced B/row"),
    lambda r: (f"{r.stock_cell:,.0f}", f"{r.allocated_per_row:,.1f}", f"{r.priced_per_row:,.1f}"),
)  # fmt: skip


@pytest.mark.parametrize("name", [c.name for c in CELLS])
def test_every_price_is_what_sglang_allocates_and_never_worse_than_stock(matrix, name) -> None:
    """Prices are what SGLang allocates; the plugin fills the budget, beats stock, binds early."""
    r = matrix[name]
    (alloc_small, alloc_large), (priced_small, priced_large) = r.allocated, r.priced
    assert alloc_large - alloc_small == priced_large - priced_small
    assert 0 <= alloc_small - priced_small <= BOOKKEEPING_BYTES
    assert r.plugin_used <= r.budget
    one_page = r.page * r.priced_per_row
    # A hybrid-SWA pool's SWA count is floored to pages: one more page can stay unused.
    pages = 2 if r.target_price.ratio_applies else 1
    assert r.budget - r.plugin_used < pages * one_page + 1
    if r.stock_used <= r.budget:  # where stock fits, the plugin serves at least its tokens
        assert r.plugin_tokens >= r.stock_tokens
    if r.reserve_gap or r.cell.fixed_pool_tokens:
        return  # not bound early (or a frozen-KV draft, which binds in its constructor)
    assert r.bound_tokens >= r.stock_tokens
    if r.stock_used <= r.budget:
        # Stock's rule leaves out each pool's padding page: that page is all binding adds.
        assert r.bound_used <= r.budget + one_page
    else:
        assert r.bound_used <= r.stock_used


def _by_tag(matrix: dict[str, CellResult], tag: str) -> CellResult:
    return next(r for r in matrix.values() if tag in r.cell.tags)


def test_each_layout_stock_misprices_is_priced_as_built(matrix) -> None:
    # Item 2: 0.5.23 stores DSA FP8 latent KV at 656 B/layer (scales and a bf16 rope).
    r = _by_tag(matrix, "dsa-fp8")
    assert r.priced_per_row == r.stock_cell  # stock is right here; so is the plugin
    bf16 = _by_tag(matrix, "dsa")
    layers = 61  # DeepSeek-V3.2's layers; one MTP layer for the draft
    indexer = (bf16.target_price.full_bytes_per_token - 1152 * layers) // layers
    assert r.target_price.full_bytes_per_token == layers * (656 + indexer)
    # Item 1: DSA + DCP replicates the index-K buffer and the draft across DCP ranks.
    r = _by_tag(matrix, "dsa-dcp")
    assert r.priced_per_row == r.stock_cell == 105_216
    # Item 3 (#39799): stock prices the dense-MLA draft at one replica under DCP.
    r = _by_tag(matrix, "dcp-dense")
    (draft,) = r.draft_prices
    (plain_draft,) = _by_tag(matrix, "mla").draft_prices
    assert draft.full_bytes_per_token == 8 * plain_draft.full_bytes_per_token == 9_216
    assert r.stock_cell - r.target_price.full_bytes_per_token == 1_152
    assert r.stock_used > r.budget >= r.plugin_used
    # Item 5 (#29857): a path-less NEXTN draft of a hybrid-GDN target.
    r = _by_tag(matrix, "gdn-pathless")
    assert not r.stock_reserved_layers  # stock reads 0 draft layers from the target config
    (draft,) = r.draft_prices
    assert draft.full_bytes_per_token > 0  # its one full-attention layer
    assert r.stock_cell == r.target_price.full_bytes_per_token
    # Stock binding declines where stock reserves less than the draft.
    assert "reserves 0 draft layer" in _by_tag(matrix, "nnpl0").reserve_gap
    assert _by_tag(matrix, "eagle3").reserve_gap == ""
    assert _by_tag(matrix, "mla").reserve_gap == ""


def _post_capture(tag: str, tmp: Path) -> tuple[Callable[[int], int], int, int, int, int]:
    """(pools' bytes at a count, budget, stock's and plugin's tokens, page) after capture."""
    cell = next(c for c in CELLS if tag in c.tags)
    layout = cell.publish(tmp, draft_runners=cell.draft_runners)
    prices = runtime_budget.price_configurators(layout.target, layout.drafts, [])
    cap, target, page = 1 << 20, layout.target, int(layout.target.page_size)
    pool_bytes = partial(_pools_bytes, (prices[0], *prices[1]), page=page)
    budget = int(0.9 * pool_bytes(cap))
    original = KVCacheConfigurator.config_from_budget
    stock = original(target, budget, cap_tokens=cap).max_total_num_tokens
    sync = KVCacheConfigurator._apply_token_constraints
    # The plugin's hook on SGLang's token sync, as HookRegistry wraps it in a server.
    hooked_sync = mock.patch.object(
        KVCacheConfigurator,
        "_apply_token_constraints",
        lambda self, tokens: runtime_budget.apply_token_constraints(sync, self, tokens),
    )
    with mock.patch.dict(runtime_budget._SIZED, {id(target): (target, prices)}), hooked_sync:
        ours = runtime_budget.config_from_budget(original, target, budget, cap_tokens=cap)
        uncapped = runtime_budget.config_from_budget(original, target, budget)
    # Without cap_tokens (the pre-capture path) the hook is stock.
    assert uncapped.max_total_num_tokens == original(target, budget).max_total_num_tokens
    return pool_bytes, budget, stock, ours.max_total_num_tokens, page


def test_post_capture_resize_fits_its_budget_and_is_never_above_stock(tmp_path) -> None:
    pool_bytes, budget, stock, ours, page = _post_capture("nnpl0", tmp_path / "nnpl0")
    assert pool_bytes(stock) > budget  # stock reserves nothing for an nnpl-0 draft
    assert ours < stock
    assert pool_bytes(ours) <= budget < pool_bytes(ours + page)
    pool_bytes, budget, stock, ours, page = _post_capture("multi-layer", tmp_path / "multi")
    assert ours == stock
    assert pool_bytes(ours) <= budget
