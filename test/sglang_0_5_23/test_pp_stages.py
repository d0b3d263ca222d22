"""Pipeline parallelism priced per stage, on 0.5.23's own configurators (no launch, ~30 s)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from harness.checkpoints.published_configs import EXAMPLES
from layouts import GIB, RunnerDouble, at_pp_stage, published

PP = 2
EXAMPLE = EXAMPLES / "llama31-70b-eagle-tp4"
ARGS = {
    "model_path": str(EXAMPLE / "target"),
    "speculative_draft_model_path": str(EXAMPLE / "draft"),
    "speculative_algorithm": "EAGLE",
    "tp_size": 4,
    "pp_size": PP,
    "mem_fraction_static": 0.85,
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}
PRE_LOAD_GIB = 79.0
# What SGLang's profiling leaves for the KV pools on each stage (a test double's answer: the
# same on both, so the stages differ only in what they are priced at).
AVAILABLE = 20 * GIB
ROWS = (640, 1280)


@dataclass
class StageResult:
    rank: int
    sizing: Any
    tokens: int
    sync_calls: list[int]
    stock_cell: float  # stock's price per row on this stage (its configurator's cell)
    stock_tokens: int  # stock's count on the same bytes
    target_row: float  # what this stage's target pool grows by per row, built
    draft_row: float  # what the draft pool grows by per row, built (0 without a draft)
    pool_bytes_at: Any  # tokens -> bytes of every pool this stage builds


def _built(kvc: Any, rows: int) -> int:
    from layouts import built_bytes
    from sglang.srt.model_executor.pool_configurator import MemoryPoolConfig

    return built_bytes(kvc, [], MemoryPoolConfig(rows, 1, rows, rows))[0]


@dataclass
class Stage:
    """One stage's configurators (without weights, at its layers) and the hook's scheduler."""

    rank: int
    target: Any
    draft: Any
    holds_draft: bool
    scheduler: Any
    # id(configurator) -> its pools' bytes built at ROWS (filled once, by _price_stage).
    fits: dict[int, tuple[int, int]] = field(default_factory=dict)


def _build_stage(rank: int, tmp: Path) -> Stage:
    import torch
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang_specinit.sglang_0_5_23.launch_policy import stage_without_draft

    layout = published(ARGS, tmp)
    target, (draft,) = layout.target, layout.drafts
    at_pp_stage(target, rank, PP)
    target.model = torch.nn.Module()  # test double: the stage's weights are not loaded

    # 0.5.23 builds no draft worker on a stage before the last under SGLANG_ENABLE_PP_SPEC.
    holds = not stage_without_draft(rank, PP)
    worker = SimpleNamespace(
        speculative_algorithm=SpeculativeAlgorithm.EAGLE,
        draft_worker=SimpleNamespace(draft_runners=[RunnerDouble(draft)]),
    )
    scheduler = SimpleNamespace(
        draft_worker=worker if holds else None,
        spec_algorithm=SpeculativeAlgorithm.EAGLE,
        server_args=layout.server_args,
        model_config=target.model_config,
        # The target runner as the hook reads it: its weights, and the device its free
        # memory is read on after the early binding.
        tp_worker=SimpleNamespace(
            model_runner=SimpleNamespace(model=target.model, device="cpu", gpu_id=0)
        ),
    )
    return Stage(rank, target, draft, holds, scheduler)


def _with_token_sync(
    kvc: Any, answer: Callable[[int], int], calls: list[int], plugin: bool = True
) -> Any:
    """A test double of SGLang's MIN all-reduce (``answer(offered)``) as the configurator's
    ``_apply_token_constraints``, with the plugin's own hook on it (or, ``plugin`` False, not)."""
    from sglang_specinit.sglang_0_5_23 import runtime_budget

    def token_sync(self: Any, offered: int) -> int:
        calls.append(offered)
        return answer(offered)

    def hooked(self: Any, offered: int) -> int:
        return runtime_budget.apply_token_constraints(token_sync, self, offered)

    return mock.patch.object(
        type(kvc), "_apply_token_constraints", hooked if plugin else token_sync
    )


def _price_stage(stage: Stage, answer: Callable[[int], int]) -> StageResult:
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator
    from sglang_specinit.phased.sizing_state import sizing_active
    from sglang_specinit.sglang_0_5_23 import runtime_budget
    from sglang_specinit.sglang_0_5_23.scheduler import stage_sizing

    rank, target, draft, holds = stage.rank, stage.target, stage.draft, stage.holds_draft
    sizing = stage_sizing(stage.scheduler)
    sync_calls: list[int] = []

    def no_stock(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the hook fell back on stock sizing")

    # On the class: the configurator's instances take no attributes of their own (slots).
    kvc_class = type(target)
    with (
        mock.patch.object(kvc_class, "_profile_available_bytes", lambda self, pre: AVAILABLE),
        _with_token_sync(target, answer, sync_calls),
        sizing_active(sizing),
    ):
        config = runtime_budget.resolve_memory_pool_config(no_stock, target, PRE_LOAD_GIB)

    configurator = create_memory_pool_configurator(target)
    page = int(target.page_size)
    stock_tokens = configurator.calculate_pool_sizes(AVAILABLE, page).max_total_num_tokens
    drafts = [draft] if holds else []

    # bytes = a + b x rows, fitted on two small builds (a pool at the stage's real count
    # would be GiBs of host memory).
    if not stage.fits:
        stage.fits.update(
            {id(kvc): (_built(kvc, ROWS[0]), _built(kvc, ROWS[1])) for kvc in [target, draft]}
        )
    fits = stage.fits

    def per_row(kvc: Any) -> float:
        small, large = fits[id(kvc)]
        return (large - small) / (ROWS[1] - ROWS[0])

    def pool_bytes_at(tokens: int) -> int:
        # The rows that grow with the count, padding page included; the constant pointer
        # tables (KiBs) are left to the 1 - f share, as SGLang's own sizing leaves them.
        return sum(round(per_row(kvc) * (tokens + page)) for kvc in [target, *drafts])

    return StageResult(
        rank=rank,
        sizing=sizing,
        tokens=int(config.max_total_num_tokens),
        sync_calls=sync_calls,
        stock_cell=float(configurator._cell_size),
        stock_tokens=int(stock_tokens),
        target_row=per_row(target),
        draft_row=per_row(draft) if holds else 0.0,
        pool_bytes_at=pool_bytes_at,
    )


@pytest.fixture(scope="module")
def built_stages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, Stage]]:
    tmp = tmp_path_factory.mktemp("pp")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("SGLANG_ENABLE_PP_SPEC", "1")
        yield {rank: _build_stage(rank, tmp) for rank in range(PP)}


@pytest.fixture(scope="module")
def stages(built_stages: dict[int, Stage]) -> Iterator[dict[int, StageResult]]:
    """The first pass: the sync double answers each stage its own offer."""
    from sglang_specinit.sglang_0_5_23 import runtime_budget

    results = {
        rank: _price_stage(stage, lambda offered: offered) for rank, stage in built_stages.items()
    }
    for r in results.values():
        plan = r.sizing.plan
        print(
            f"\nPP{r.rank}: stock {r.stock_cell:,.0f} B/row -> {r.stock_tokens:,} tokens; "
            f"plugin {plan.priced_bytes_per_token:,.0f} B/row -> {r.tokens:,} tokens "
            f"(target {r.target_row:,.0f} + draft {r.draft_row:,.0f} built)"
        )
    yield results
    for stage in built_stages.values():
        runtime_budget._SIZED.pop(id(stage.target), None)


def _min_over_stages(offers: dict[int, int], rank: int) -> Callable[[int], int]:
    """The second pass's sync double for stage ``rank``: it offers what it offered in the
    first pass, and the all-reduce answers the MIN of every stage's offer."""

    def answer(offered: int) -> int:
        assert offered == offers[rank]
        return min(offers.values())

    return answer


@pytest.fixture(scope="module")
def synced(
    built_stages: dict[int, Stage], stages: dict[int, StageResult]
) -> dict[int, StageResult]:
    """The second pass: every stage sized with SGLang's MIN over stages answered."""
    offers = {rank: r.sync_calls[0] for rank, r in stages.items()}
    return {
        rank: _price_stage(stage, _min_over_stages(offers, rank))
        for rank, stage in built_stages.items()
    }


def test_each_stage_is_charged_what_it_builds_and_never_worse_than_stock(stages) -> None:
    first, last = stages[0], stages[PP - 1]
    plan = first.sizing.plan
    assert first.sizing.stage_holds_draft is False
    assert plan.draft_kv_bytes_per_token == 0 == plan.draft_kv_pool_bytes
    assert plan.priced_bytes_per_token == pytest.approx(first.target_row, abs=1e-6)
    # Stock charges the draft-less stage a draft layer it does not hold.
    assert first.stock_cell > first.target_row
    assert first.tokens > first.stock_tokens
    # The last stage is charged its draft as built.
    plan = last.sizing.plan
    assert last.sizing.stage_holds_draft is True
    assert last.draft_row > 0
    assert plan.draft_kv_bytes_per_token == pytest.approx(last.draft_row, abs=1e-6)
    assert plan.priced_bytes_per_token == pytest.approx(last.target_row + last.draft_row, abs=1e-6)
    for r in stages.values():
        # Every stage syncs its count exactly once, and is not sized past its bytes.
        assert r.sync_calls == [r.sizing.plan.tokens]
        page = r.sizing.inputs.page_size
        assert r.pool_bytes_at(r.tokens) <= AVAILABLE
        assert r.pool_bytes_at(r.tokens + page) > AVAILABLE
    # The launch's count is the last stage's, and never worse than stock's.
    ours = min(r.tokens for r in stages.values())
    stock = min(r.stock_tokens for r in stages.values())
    assert ours == last.tokens
    stock_fits = all(r.pool_bytes_at(stock) <= AVAILABLE for r in stages.values())
    print(f"\nlaunch: stock {stock:,} tokens (fits: {stock_fits}) -> plugin {ours:,}")
    if stock_fits:
        assert ours >= stock
    else:
        assert ours >= stock - last.sizing.inputs.page_size


def test_draft_less_stage_is_priced_not_stepped_aside(built_stages) -> None:
    from sglang_specinit.sglang_0_5_23.launch_policy import pricing_blocker

    first = built_stages[0]
    assert first.scheduler.draft_worker is None
    # Test double: the plugin's all-or-nothing patch check, which only a process that loaded
    # the plugin (a scheduler) has run, answers that every patch applied.
    with mock.patch("sglang_specinit.compat.launch_problems", return_value=[]):
        blocker = pricing_blocker(first.scheduler)
    assert blocker is None, blocker.reason


def test_every_stage_builds_its_pools_and_plan_at_the_synced_count(stages, synced) -> None:
    low = min(r.tokens for r in stages.values())
    assert stages[0].tokens > low  # the draft-less stage's own count is larger
    for rank, r in synced.items():
        assert r.tokens == low
        assert r.pool_bytes_at(r.tokens) <= AVAILABLE
        plan = r.sizing.plan
        assert plan.tokens == low
        assert plan.target_kv_pool_bytes == stages[rank].sizing.plan.target_kv_pool_bytes - (
            (stages[rank].tokens - low) * r.target_row
        )
        own = stages[rank].tokens
        assert r.sizing.stage_tokens == (own if own != low else None)


POST_CAPTURE_BUDGET = int(19.9 * GIB)  # what the resize's budget leaves each stage after capture


def _post_capture_counts(built_stages: dict[int, Stage], cap: int, plugin: bool) -> dict[int, int]:
    """Each stage's count from 0.5.23's ``config_from_budget`` after capture (capped at the
    pre-capture count ``cap``), through the plugin's hooks or stock's method, with the token
    sync's two passes (each stage's offer, then the MIN over stages)."""
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang_specinit.sglang_0_5_23 import runtime_budget

    stock = KVCacheConfigurator.config_from_budget

    def resize(stage: Stage, answer: Callable[[int], int], calls: list[int]) -> int:
        with _with_token_sync(stage.target, answer, calls, plugin):
            if plugin:
                config = runtime_budget.config_from_budget(
                    stock, stage.target, POST_CAPTURE_BUDGET, cap_tokens=cap
                )
            else:
                config = stock(stage.target, POST_CAPTURE_BUDGET, cap_tokens=cap)
        return int(config.max_total_num_tokens)

    offers: dict[int, int] = {}
    for rank, stage in built_stages.items():
        calls: list[int] = []
        resize(stage, lambda offered: offered, calls)
        (offers[rank],) = calls
    counts = {}
    for rank, stage in built_stages.items():
        calls = []
        counts[rank] = resize(stage, _min_over_stages(offers, rank), calls)
        assert len(calls) == 1  # SGLang's sync, once per stage
    return counts


def test_post_capture_resize_serves_one_count_on_every_stage(built_stages, synced) -> None:
    cap = synced[PP - 1].tokens
    ours = _post_capture_counts(built_stages, cap, plugin=True)
    stock = _post_capture_counts(built_stages, cap, plugin=False)
    print(f"\npost-capture at {POST_CAPTURE_BUDGET / GIB:.1f} GiB: stock {stock} -> plugin {ours}")
    assert len(set(ours.values())) == 1
    assert len(set(stock.values())) == 1
    for rank, r in synced.items():
        assert ours[rank] <= stock[rank]
        assert r.pool_bytes_at(ours[rank]) <= POST_CAPTURE_BUDGET
