"""Pipeline parallelism priced per stage, on 0.5.23's own configurators (no launch, ~30 s)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
from layouts import GIB, LLAMA70B_PP2, at_pp_stage, built_bytes, published, scheduler_double
from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
from sglang.srt.model_executor.pool_configurator import (
    MemoryPoolConfig,
    create_memory_pool_configurator,
)
from sglang_specinit.phased.sizing_state import sizing_active
from sglang_specinit.sglang_0_5_23 import runtime_budget
from sglang_specinit.sglang_0_5_23.launch_policy import pricing_blocker, stage_without_draft
from sglang_specinit.sglang_0_5_23.scheduler import stage_sizing

PP = 2
ARGS = {**LLAMA70B_PP2, "mem_fraction_static": 0.85}
PRE_LOAD_GIB = 79.0
# What SGLang's profiling leaves for the KV pools on each stage (a test double's answer: the
# same on both, so the stages differ only in what they are priced at).
AVAILABLE = 20 * GIB
ROWS = (640, 1280)


def _per_row(kvc: Any) -> float:
    """``kvc``'s pools' growth per row, fitted on two small builds (a real count would be GiBs)."""
    small, large = (built_bytes(kvc, [], MemoryPoolConfig(n, 1, n, n))[0] for n in ROWS)
    return (large - small) / (ROWS[1] - ROWS[0])


@dataclass
class Stage:
    """One stage's configurators (at its layers) and scheduler; the rest set when first priced."""

    rank: int
    target: Any
    draft: Any
    holds_draft: bool
    scheduler: Any
    stock_cell: float = 0.0  # stock's price per row on this stage (its configurator's cell)
    stock_tokens: int = 0  # stock's count on AVAILABLE
    target_row: float = 0.0  # what the target pool grows by per row, built
    draft_row: float = 0.0  # what the draft pool grows by per row, built (0 without a draft)

    def pool_bytes_at(self, tokens: int) -> int:
        """Bytes of the rows that grow with the count, padding page included; the constant
        pointer tables (KiBs) are left to the 1 - f share, as SGLang's own sizing leaves them."""
        rows = tokens + int(self.target.page_size)
        return sum(round(row * rows) for row in (self.target_row, self.draft_row))


@dataclass
class StageResult:
    stage: Stage
    sizing: Any
    tokens: int
    sync_calls: list[int]


def _build_stage(rank: int, tmp: Path) -> Stage:
    layout = published(ARGS, tmp)
    target, (draft,) = layout.target, layout.drafts
    at_pp_stage(target, rank, PP)
    target.model = torch.nn.Module()  # test double: the stage's weights are not loaded
    # 0.5.23 builds no draft worker on a stage before the last under SGLANG_ENABLE_PP_SPEC.
    holds = not stage_without_draft(rank, PP)
    return Stage(rank, target, draft, holds, scheduler_double(layout, "EAGLE", holds))


def _with_token_sync(
    kvc: Any, answer: Callable[[int], int], calls: list[int], plugin: bool = True
) -> Any:
    """A test double of SGLang's MIN all-reduce (``answer(offered)``) as the configurator's
    ``_apply_token_constraints``, with the plugin's own hook on it (or, ``plugin`` False, not)."""

    def token_sync(self: Any, offered: int) -> int:
        calls.append(offered)
        return answer(offered)

    def hooked(self: Any, offered: int) -> int:
        return runtime_budget.apply_token_constraints(token_sync, self, offered)

    patched = hooked if plugin else token_sync
    return mock.patch.object(type(kvc), "_apply_token_constraints", patched)


def _price_stage(stage: Stage, answer: Callable[[int], int], sync_calls: list[int]) -> StageResult:
    target = stage.target
    sizing = stage_sizing(stage.scheduler)
    no_stock = mock.Mock(side_effect=AssertionError("the hook fell back on stock sizing"))
    # On the class: the configurator's instances take no attributes of their own (slots).
    kvc_class = type(target)
    with (
        mock.patch.object(kvc_class, "_profile_available_bytes", lambda self, pre: AVAILABLE),
        _with_token_sync(target, answer, sync_calls),
        sizing_active(sizing),
    ):
        config = runtime_budget.resolve_memory_pool_config(no_stock, target, PRE_LOAD_GIB)

    if not stage.target_row:
        configurator = create_memory_pool_configurator(target)
        stage.stock_cell = float(configurator._cell_size)
        pool_sizes = configurator.calculate_pool_sizes(AVAILABLE, int(target.page_size))
        stage.stock_tokens = int(pool_sizes.max_total_num_tokens)
        stage.target_row = _per_row(target)
        stage.draft_row = _per_row(stage.draft) if stage.holds_draft else 0.0
    return StageResult(stage, sizing, int(config.max_total_num_tokens), sync_calls)


@pytest.fixture(scope="module")
def built_stages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, Stage]]:
    tmp = tmp_path_factory.mktemp("pp")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("SGLANG_ENABLE_PP_SPEC", "1")
        yield {rank: _build_stage(rank, tmp) for rank in range(PP)}


def _two_passes(size: Callable[..., Any], stages: dict[int, Stage]) -> tuple[dict[int, Any], ...]:
    """``size(stage, answer, calls)`` on every stage in the token sync's two passes (a MIN
    all-reduce double): each answered its own offer, then each its first offer's MIN over stages."""
    calls: dict[int, list[int]] = {rank: [] for rank in stages}
    own = {
        rank: size(stage, lambda offered: offered, calls[rank]) for rank, stage in stages.items()
    }
    offers = {rank: offered for rank, (offered,) in calls.items()}  # SGLang's sync, once a stage

    def min_over_stages(rank: int) -> Callable[[int], int]:
        def answer(offered: int) -> int:
            assert offered == offers[rank]
            return min(offers.values())

        return answer

    again: dict[int, list[int]] = {rank: [] for rank in stages}
    synced = {
        rank: size(stage, min_over_stages(rank), again[rank]) for rank, stage in stages.items()
    }
    assert all(len(c) == 1 for c in again.values())
    return own, synced


@pytest.fixture(scope="module")
def passes(built_stages: dict[int, Stage]) -> Iterator[tuple[dict[int, StageResult], ...]]:
    """Every stage priced by the hook in both passes: (each on its own offer, at the MIN)."""
    results = _two_passes(_price_stage, built_stages)
    for r in results[0].values():
        s, plan = r.stage, r.sizing.plan
        print(
            f"\nPP{s.rank}: stock {s.stock_cell:,.0f} B/row -> {s.stock_tokens:,} tokens; "
            f"plugin {plan.priced_bytes_per_token:,.0f} B/row -> {r.tokens:,} tokens "
            f"(target {s.target_row:,.0f} + draft {s.draft_row:,.0f} built)"
        )
    yield results
    for stage in built_stages.values():
        runtime_budget._SIZED.pop(id(stage.target), None)


POST_CAPTURE_BUDGET = int(19.9 * GIB)  # what the resize's budget leaves each stage after capture


def _post_capture_counts(built_stages: dict[int, Stage], cap: int, plugin: bool) -> dict[int, int]:
    """Each stage's post-capture count (capped at ``cap``) from 0.5.23's ``config_from_budget``,
    plugin's hooks or stock's, through the token sync's two passes (own offer, then the MIN)."""
    stock = KVCacheConfigurator.config_from_budget
    sized = partial(runtime_budget.config_from_budget, stock) if plugin else stock

    def resize(stage: Stage, answer: Callable[[int], int], calls: list[int]) -> int:
        with _with_token_sync(stage.target, answer, calls, plugin):
            config = sized(stage.target, POST_CAPTURE_BUDGET, cap_tokens=cap)
        return int(config.max_total_num_tokens)

    return _two_passes(resize, built_stages)[1]


def test_each_stage_is_charged_what_it_builds_and_never_worse_than_stock(
    built_stages, passes
) -> None:
    stages, synced = passes
    first, last = stages[0], stages[PP - 1]
    plan = first.sizing.plan
    assert first.sizing.stage_holds_draft is False
    assert plan.draft_kv_bytes_per_token == 0 == plan.draft_kv_pool_bytes
    assert plan.priced_bytes_per_token == pytest.approx(first.stage.target_row, abs=1e-6)
    # Stock charges the draft-less stage a draft layer it does not hold.
    assert first.stage.stock_cell > first.stage.target_row
    assert first.tokens > first.stage.stock_tokens
    # The last stage is charged its draft as built.
    plan = last.sizing.plan
    assert last.sizing.stage_holds_draft is True
    assert last.stage.draft_row > 0
    assert plan.draft_kv_bytes_per_token == pytest.approx(last.stage.draft_row, abs=1e-6)
    built = last.stage.target_row + last.stage.draft_row
    assert plan.priced_bytes_per_token == pytest.approx(built, abs=1e-6)
    for r in stages.values():
        # Every stage syncs its count exactly once, and is not sized past its bytes.
        assert r.sync_calls == [r.sizing.plan.tokens]
        page = r.sizing.inputs.page_size
        assert r.stage.pool_bytes_at(r.tokens) <= AVAILABLE
        assert r.stage.pool_bytes_at(r.tokens + page) > AVAILABLE
    # The launch's count is the last stage's, and never worse than stock's.
    ours = min(r.tokens for r in stages.values())
    stock = min(r.stage.stock_tokens for r in stages.values())
    assert ours == last.tokens
    stock_fits = all(r.stage.pool_bytes_at(stock) <= AVAILABLE for r in stages.values())
    print(f"\nlaunch: stock {stock:,} tokens (fits: {stock_fits}) -> plugin {ours:,}")
    if stock_fits:
        assert ours >= stock
    else:
        assert ours >= stock - last.sizing.inputs.page_size

    # The draft-less stage is priced, not stepped aside.
    assert first.stage.scheduler.draft_worker is None
    # Test double: the plugin's all-or-nothing patch check, which only a process that loaded
    # the plugin (a scheduler) has run, answers that every patch applied.
    with mock.patch("sglang_specinit.compat.launch_problems", return_value=[]):
        blocker = pricing_blocker(first.stage.scheduler)
    assert blocker is None, blocker.reason

    # Every stage builds its pools and plan at the synced count.
    assert stages[0].tokens > ours  # the draft-less stage's own count is larger
    for rank, r in synced.items():
        assert r.tokens == ours  # below each stage's own count, which fits its bytes (above)
        plan = r.sizing.plan
        assert plan.tokens == ours
        assert plan.target_kv_pool_bytes == stages[rank].sizing.plan.target_kv_pool_bytes - (
            (stages[rank].tokens - ours) * r.stage.target_row
        )
        own = stages[rank].tokens
        assert r.sizing.stage_tokens == (own if own != ours else None)

    # The post-capture resize serves one count on every stage.
    cap = synced[PP - 1].tokens
    resized = _post_capture_counts(built_stages, cap, plugin=True)
    stock_resized = _post_capture_counts(built_stages, cap, plugin=False)
    budget_gib = POST_CAPTURE_BUDGET / GIB
    print(f"\npost-capture at {budget_gib:.1f} GiB: stock {stock_resized} -> plugin {resized}")
    assert len(set(resized.values())) == 1
    assert len(set(stock_resized.values())) == 1
    for rank, r in synced.items():
        assert resized[rank] <= stock_resized[rank]
        assert r.stage.pool_bytes_at(resized[rank]) <= POST_CAPTURE_BUDGET
