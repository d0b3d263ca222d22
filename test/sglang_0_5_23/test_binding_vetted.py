"""The early binding waits for the sizing hook: bound where it prices, vetted where it does not."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import torch
from layouts import (
    GIB,
    LLAMA_EAGLE3,
    RunnerDouble,
    draft_config,
    gpt_oss_swa_cap,
    published,
)

AVAILABLE = 20 * GIB  # test double's reading of what profiling leaves for the pools


def _scheduler(layout: Any) -> Any:
    """TEST DOUBLE of the scheduler as the pool phase reads it: an EAGLE3 spec worker holding
    one draft runner, the target runner, the launch's ServerArgs."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    (draft,) = layout.drafts
    return SimpleNamespace(
        spec_algorithm=SpeculativeAlgorithm.EAGLE3,
        server_args=layout.server_args,
        draft_worker=SimpleNamespace(
            speculative_algorithm=SpeculativeAlgorithm.EAGLE3,
            draft_worker=SimpleNamespace(draft_runners=[RunnerDouble(draft)]),
        ),
        tp_worker=SimpleNamespace(model_runner=RunnerDouble(layout.target)),
    )


def _run_hook(layout: Any, sizing: Any, stock: Any, profile: Any = None) -> Any:
    """The plugin's sizing hook on the target's configurator, ``sizing`` active, with a test
    double for the profiling (``profile``; default: :data:`AVAILABLE`)."""
    from sglang_specinit.phased.sizing_state import sizing_active
    from sglang_specinit.sglang_0_5_23 import runtime_budget

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
    from sglang_specinit.sglang_0_5_23.scheduler import stage_sizing

    kv16 = draft_config(tmp_path / "eagle3-kv16", "gpt-oss-20b-eagle3", num_key_value_heads=16)
    layout = published(gpt_oss_swa_cap(kv16), tmp_path)
    scheduler = _scheduler(layout)
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
    from sglang_specinit.live_sizing import DraftDescription
    from sglang_specinit.phased.sizing_state import TargetSizing

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

    def no_stock(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the hook fell back on stock sizing")

    config = _run_hook(layout, sizing, no_stock, profile)
    assert events == ["bind priced=True", "profile"]
    assert sizing.plan is not None and config.max_total_num_tokens == sizing.plan.tokens
