"""DeepSeek-V4-Flash + MTP on 0.5.23's own DSV4 configurator: never worse than stock."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.matrices.dsv4_flash import CELLS, GIB, Cell, publish
from harness.matrices.step_aside import markdown_table
from layouts import layout_matrix


@dataclass
class Result:
    cell: Cell
    page: int
    draft_price: Any
    allocated: tuple[int, int]  # the draft pool built at two more sizes
    priced: tuple[int, int]
    cap_mode: bool
    stock_reserve_per_row: float
    draft_per_row: float
    budget: int
    stock_tokens: int
    stock_used: int
    plugin_tokens: int
    plugin_used: int
    coefficient: float


def evaluate(
    cell: Cell,
    tmp: Path,
    weights: tuple[int, int, int] | None = None,
    budget: int | None = None,
) -> Result:
    """``cell`` sized both ways; ``weights`` (target, draft's own, duplicates per rank) and
    ``budget`` (f x free) default to the cell's (the planner's test passes the plan's)."""
    from sglang.srt.model_executor.pool_configurator import (
        MemoryPoolConfig,
        create_memory_pool_configurator,
    )
    from sglang_specinit.budget import kv_pool_bytes
    from sglang_specinit.sglang_0_5_23 import dsv4_sizing, pool_probe

    published = publish(cell, tmp)
    target, (draft,) = published.target, published.drafts
    layout = (target, draft)
    page = int(target.page_size)
    price = pool_probe.measure_configurator(draft, pool_probe.target_split(target))

    allocated, priced = [], []
    for pages in (5, 10):
        swa = pages * page
        config = MemoryPoolConfig(10 * swa, 1, 10 * swa, swa)
        allocated.append(dsv4_sizing.built_pool_bytes(draft, config))
        priced.append(kv_pool_bytes(price, swa, page))

    w_target, w_draft, w_dup = weights or cell.weights()
    if budget is None:
        budget = int(cell.mem_fraction_static * cell.device_gib * GIB)
    stock = create_memory_pool_configurator(target)
    stock_config = dsv4_sizing.solve(target, stock, budget - (w_target + w_draft + w_dup), 0)
    stock_target, stock_draft = (dsv4_sizing.built_pool_bytes(k, stock_config) for k in layout)
    # Stock's peak: the target pool exists while the duplicates are still resident (0.5.23
    # binds them in the draft's alloc_memory_pool), the draft pool once they are gone.
    stock_used = max(
        w_target + w_draft + w_dup + stock_target, w_target + w_draft + stock_target + stock_draft
    )

    ours = dsv4_sizing.priced_configurator(target, [price])
    available = budget - (w_target + w_draft)
    config = dsv4_sizing.solve(target, ours, available, dsv4_sizing.draft_padding_bytes([price]))
    config = dsv4_sizing.fitted(target, ours, config, available, [draft])
    plugin_used = w_target + w_draft + sum(dsv4_sizing.built_pool_bytes(k, config) for k in layout)
    return Result(
        cell=cell,
        page=page,
        draft_price=price,
        allocated=tuple(allocated),
        priced=tuple(priced),
        cap_mode=stock.swa_cap_tokens is not None,
        stock_reserve_per_row=dsv4_sizing.stock_draft_bytes_per_row(target),
        draft_per_row=dsv4_sizing.draft_bytes_per_row(ours, [price]),
        budget=budget,
        stock_tokens=int(stock_config.max_total_num_tokens),
        stock_used=stock_used,
        plugin_tokens=int(config.max_total_num_tokens),
        plugin_used=plugin_used,
        coefficient=float(ours.bytes_per_full_token),
    )


def render_table(results: Any) -> str:
    header = ("cell", "stock reserves B/row", "draft allocates B/row", "tokens stock -> plugin",
              "budget use stock -> plugin")  # fmt: skip
    return markdown_table(header, [
        (r.cell.name, f"{r.stock_reserve_per_row:,.1f}", f"{r.draft_per_row:,.1f}",
         f"{r.stock_tokens:,} -> {r.plugin_tokens:,}",
         f"{100 * r.stock_used / r.budget:.2f} % -> {100 * r.plugin_used / r.budget:.2f} %")
        for r in results
    ])  # fmt: skip


matrix = layout_matrix(CELLS, evaluate, render_table, "SPECINIT_TEST_MATRIX_TABLE")
IDS = [c.name for c in CELLS]


@pytest.mark.parametrize("name", IDS)
def test_draft_price_is_what_its_pool_allocates(matrix, name) -> None:
    r = matrix[name]
    (a_small, a_large), (p_small, p_large) = r.allocated, r.priced
    assert a_large - a_small == p_large - p_small
    assert 0 <= a_small - p_small <= 16 << 10  # constant pointer tables only
    # The NextN draft: one SWA layer, nothing that scales with full tokens.
    assert r.draft_price.full_bytes_per_token == 0 < r.draft_price.swa_bytes_per_token


@pytest.mark.parametrize("name", IDS)
def test_stock_over_reserves_the_nextn_draft(matrix, name) -> None:
    r = matrix[name]
    assert r.stock_reserve_per_row > r.draft_per_row > 0


@pytest.mark.parametrize("name", IDS)
def test_plugin_fits_the_budget_and_fills_it(matrix, name) -> None:
    r = matrix[name]
    assert r.plugin_used <= r.budget
    # Within a few pages (about 2 MB each): SGLang's own solve floors to pages, its SWA split
    # to pages, and the step down to the built pools' bytes is whole pages.
    assert r.budget - r.plugin_used < 8 * r.page * r.coefficient


@pytest.mark.parametrize("name", IDS)
def test_never_worse_than_stock(matrix, name) -> None:
    r = matrix[name]
    if r.stock_used <= r.budget:
        assert r.plugin_tokens >= r.stock_tokens
    else:
        assert r.plugin_used <= r.budget < r.stock_used


def test_every_v4_flash_launch_is_a_ratio_launch(matrix) -> None:
    assert not any(r.cap_mode for r in matrix.values())


def test_h200_tp4_reserve_is_one_target_layer_share(matrix) -> None:
    """The issue's numbers: 180.4 B reserved per target row against 58.5 B allocated."""
    r = next(r for r in matrix.values() if "h200-tp4" in r.cell.tags)
    assert round(r.stock_reserve_per_row, 1) == 180.4
    assert r.draft_per_row == 58.5
