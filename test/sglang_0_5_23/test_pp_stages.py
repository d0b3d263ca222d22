"""Pipeline parallelism priced per stage, on 0.5.23's own configurators (no launch, ~30 s).

Llama-3.1-70B + EAGLE at TP 4 PP 2 with ``SGLANG_ENABLE_PP_SPEC=1``, the layout the shipped
example publishes: 0.5.23 builds the draft on the last stage only
(``managers/scheduler.py:1041-1050``), yet every stage's target cell reserves the draft's layer
(``model_executor/pool_configurator.py:259-305``: ``spec_aux_config`` comes from the draft
path on every stage). Each stage's configurator is built without weights
(``sglang_0_5_23.offline_configurator``) at that stage's layer range, and the plugin's own
sizing hook (``runtime_budget.resolve_memory_pool_config``) runs on it with the sizing the
scheduler hook makes for that stage (``scheduler.stage_sizing``). Three test doubles stand in
for what only a launch has, each named: an empty module for the unloaded weights, a fixed
``_profile_available_bytes`` for the device reading, and a recording
``_apply_token_constraints`` for SGLang's MIN all-reduce over stages (one process here).

Fails if the draft-less stage is charged any draft bytes, if the last stage is not charged
its draft's pool as built, if the hook skips or repeats SGLang's token sync, or if a stage is
sized past its bytes. The live PP 2 launch is ``test_pp_stages_live.py`` (slow).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from harness.checkpoints.published_configs import EXAMPLES
from harness.matrices.step_aside import at_pp_stage

GIB = 1 << 30
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


class DraftRunnerDouble:
    """Test double of a draft ``ModelRunner``: no weights; its ``init_kv_cache_configurator``
    hands back the configurator 0.5.23 builds for the published draft."""

    def __init__(self, configurator: Any) -> None:
        import torch

        self._configurator = configurator
        self.model = torch.nn.Module()

    def init_kv_cache_configurator(self, draft_parallel_layout: Any = None) -> None:
        self.kv_cache_configurator = self._configurator


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
    from harness.matrices.step_aside import built_bytes
    from sglang.srt.model_executor.pool_configurator import MemoryPoolConfig

    config = MemoryPoolConfig(
        max_total_num_tokens=rows,
        max_running_requests=1,
        full_max_total_num_tokens=rows,
        swa_max_total_num_tokens=rows,
    )
    return built_bytes(kvc, [], config)[0]


def _price_stage(rank: int, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> StageResult:
    import torch
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang_specinit.sglang_0_5_23 import runtime_budget
    from sglang_specinit.sglang_0_5_23.launch_policy import stage_without_draft
    from sglang_specinit.sglang_0_5_23.offline_configurator import published_layout
    from sglang_specinit.sglang_0_5_23.scheduler import stage_sizing
    from sglang_specinit.sizing_state import sizing_active

    monkeypatch.setenv("SGLANG_ENABLE_PP_SPEC", "1")
    with mock.patch("torch.cuda.get_device_capability", return_value=(9, 0)):
        layout = published_layout(**ARGS)
    target, (draft,) = layout.target, layout.drafts
    at_pp_stage(target, rank, PP)
    target.model = torch.nn.Module()  # test double: the stage's weights are not loaded

    # What the scheduler hook sees on this stage: 0.5.23 builds no draft worker on a stage
    # before the last under SGLANG_ENABLE_PP_SPEC (its rule, read from its source).
    holds = not stage_without_draft(rank, PP)
    worker = None
    if holds:
        worker = SimpleNamespace(
            speculative_algorithm=SpeculativeAlgorithm.EAGLE,
            draft_worker=SimpleNamespace(draft_runners=[DraftRunnerDouble(draft)]),
        )
    scheduler = SimpleNamespace(
        draft_worker=worker,
        spec_algorithm=SpeculativeAlgorithm.EAGLE,
        tp_worker=SimpleNamespace(model_runner=SimpleNamespace(model=target.model)),
    )
    sizing = stage_sizing(scheduler)

    sync_calls: list[int] = []

    def token_sync(tokens: int) -> int:
        sync_calls.append(tokens)  # test double of the MIN all-reduce: this stage's value
        return tokens

    def no_stock(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the hook fell back on stock sizing")

    # On the class: the configurator's instances take no attributes of their own (slots).
    kvc_class = type(target)
    with (
        mock.patch.object(kvc_class, "_profile_available_bytes", lambda self, pre: AVAILABLE),
        mock.patch.object(kvc_class, "_apply_token_constraints", lambda self, t: token_sync(t)),
        sizing_active(sizing),
    ):
        config = runtime_budget.resolve_memory_pool_config(no_stock, target, PRE_LOAD_GIB)

    configurator = create_memory_pool_configurator(target)
    page = int(target.page_size)
    stock_tokens = configurator.calculate_pool_sizes(AVAILABLE, page).max_total_num_tokens
    drafts = [draft] if holds else []

    # bytes = a + b x rows, fitted on two small builds (a pool at the stage's real count
    # would be GiBs of host memory).
    fits = {id(kvc): (_built(kvc, ROWS[0]), _built(kvc, ROWS[1])) for kvc in [target, draft]}

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
def stages(tmp_path_factory: pytest.TempPathFactory) -> dict[int, StageResult]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        root = tmp_path_factory.mktemp("pp-stages")
        results = {rank: _price_stage(rank, root / str(rank), monkeypatch) for rank in range(PP)}
    for r in results.values():
        plan = r.sizing.plan
        print(
            f"\nPP{r.rank}: stock {r.stock_cell:,.0f} B/row -> {r.stock_tokens:,} tokens; "
            f"plugin {plan.priced_bytes_per_token:,.0f} B/row -> {r.tokens:,} tokens "
            f"(target {r.target_row:,.0f} + draft {r.draft_row:,.0f} built)"
        )
    return results


def test_draft_less_stage_is_charged_no_draft(stages) -> None:
    first = stages[0]
    plan = first.sizing.plan
    assert first.sizing.stage_holds_draft is False
    assert plan.draft_kv_bytes_per_token == 0 == plan.draft_kv_pool_bytes
    assert plan.priced_bytes_per_token == pytest.approx(first.target_row, abs=1e-6)
    # Stock charges this stage a draft layer it does not hold.
    assert first.stock_cell > first.target_row
    assert first.tokens > first.stock_tokens


def test_last_stage_is_charged_its_draft_as_built(stages) -> None:
    last = stages[PP - 1]
    plan = last.sizing.plan
    assert last.sizing.stage_holds_draft is True
    assert last.draft_row > 0
    assert plan.draft_kv_bytes_per_token == pytest.approx(last.draft_row, abs=1e-6)
    assert plan.priced_bytes_per_token == pytest.approx(last.target_row + last.draft_row, abs=1e-6)


def test_every_stage_syncs_its_count_exactly_once(stages) -> None:
    """SGLang's MIN all-reduce over stages runs once per rank, as in stock's sizing, whether
    the stage holds the draft or not: the collectives of the two stages line up."""
    for r in stages.values():
        assert r.sync_calls == [r.sizing.plan.tokens]


def test_no_stage_is_sized_past_its_bytes(stages) -> None:
    """Each stage's pools, built at its count, fit the bytes it was sized within; one page more
    would not (the count is the most its bytes hold)."""
    for r in stages.values():
        page = r.sizing.inputs.page_size
        assert r.pool_bytes_at(r.tokens) <= AVAILABLE
        assert r.pool_bytes_at(r.tokens + page) > AVAILABLE


def test_launch_count_is_the_last_stages_and_never_worse_than_stocks(stages) -> None:
    """The launch serves the minimum over stages: the last stage's here (it holds the draft).
    Where stock's pools at stock's count fit every stage's bytes, the plugin serves at least
    as many tokens; where they do not (stock leaves each pool's padding row out of its
    price), the plugin's still fit (test above) and it serves at most a page fewer."""
    ours = min(r.tokens for r in stages.values())
    stock = min(r.stock_tokens for r in stages.values())
    assert ours == stages[PP - 1].tokens
    stock_fits = all(r.pool_bytes_at(stock) <= AVAILABLE for r in stages.values())
    print(f"\nlaunch: stock {stock:,} tokens (fits: {stock_fits}) -> plugin {ours:,}")
    if stock_fits:
        assert ours >= stock
    else:
        assert ours >= stock - stages[PP - 1].sizing.inputs.page_size
