"""DeepSeek-V4-Flash + MTP on 0.5.23's DSV4 configurator, and through the server's hook."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import torch
from harness.checkpoints.published_configs import EXAMPLES
from layouts import SPEC_CHAIN, Launch, RunnerDouble, Sized, Weights, layout_matrix
from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
from sglang.srt.model_executor.pool_configurator import (
    MemoryPoolConfig,
    create_memory_pool_configurator,
)
from sglang.srt.plugins.hook_registry import HookRegistry
from sglang_specinit.budget import kv_pool_bytes
from sglang_specinit.hooks import ModulePatch, apply_module_patch
from sglang_specinit.live_sizing import DraftDescription, SpecInitBudgetError
from sglang_specinit.phased.sizing_state import TargetSizing, sizing_active
from sglang_specinit.sglang_0_5_23 import dsv4_sizing, pool_probe, runtime_budget

# V4-Flash, bytes (estimates from the config: 256 experts x 3 x 4096 x 2048 per layer).
EXPERTS_FP4_PER_LAYER = 3_422_552_064  # e2m1 + one e8m0 scale per 32 values
EXPERTS_FP8_PER_LAYER = 6_442_450_944 + 6_442_450_944 // (128 * 128) * 4
CHECKPOINT_FP4 = 159_900_000_000  # FP4 experts, FP8 attention/dense, one MTP block
MTP_BLOCK = 3_520_000_000  # one decoder layer's worth
VOCAB_TABLE = 129_280 * 4096 * 2  # the NextN draft's own embed / lm_head (bf16), each
GPUS = {"H200": (140.0, (9, 0)), "B200": (178.0, (10, 0))}  # GiB, compute capability


def v4_weights(tp: int, fp8_experts: bool) -> Weights:
    """Per rank: the target, the MTP block, the NextN draft's own embed and lm_head."""
    target, draft = CHECKPOINT_FP4 - MTP_BLOCK, MTP_BLOCK
    if fp8_experts:
        extra = EXPERTS_FP8_PER_LAYER - EXPERTS_FP4_PER_LAYER
        target, draft = target + 43 * extra, draft + extra
    return Weights(target // tp, draft // tp, 2 * VOCAB_TABLE // tp)


def v4_cell(gpu: str, experts: str, tp: int, swa_ratio: float | None = None) -> Launch:
    """V4-Flash + MTP as published (43 layers, one MTP layer, FP8 dense, FP4 routed experts)."""
    args = {
        "model_path": str(EXAMPLES / "deepseek-v4-flash-mtp" / "target"),
        "speculative_algorithm": "EAGLE",
        "trust_remote_code": True,
        "tp_size": tp,
        **SPEC_CHAIN,
    }
    name = f"V4-Flash MTP, {gpu} {experts}, TP {tp}"
    if swa_ratio is not None:
        args["swa_full_tokens_ratio"] = swa_ratio
        name += f", ratio {swa_ratio}"
    device_gib, capability = GPUS[gpu]
    weights = partial(v4_weights, tp, experts == "FP8")
    return Launch(name, args, weights, device_gib, capability=capability)


CELLS = [
    *(v4_cell("H200", experts, tp) for experts, tp in (("FP8", 4), ("FP8", 8), ("FP4", 4))),
    *(v4_cell("B200", "FP4", tp, ratio) for tp, ratio in ((4, 0.1), (8, 0.1), (4, 0.2))),
]


def publish(cell: Launch, tmp: Path) -> Any:
    """``cell``'s launch as 0.5.23 publishes it on the cell's GPU, its fraction passed."""
    return cell.publish(tmp, mem_fraction_static=cell.mem_fraction_static)


@dataclasses.dataclass
class Result(Sized):
    draft_price: Any
    allocated: tuple[int, int]  # the draft pool built at two more sizes
    priced: tuple[int, int]
    cap_mode: bool
    stock_reserve_per_row: float
    draft_per_row: float
    coefficient: float


def _sized(target: Any, draft: Any, available: int, fitted: Any = None) -> tuple[Any, Any, Any]:
    """(draft's measured price, configurator priced with it, the plugin's ``fitted`` config)."""
    price = pool_probe.measure_configurator(draft, pool_probe.target_split(target))
    ours = dsv4_sizing.priced_configurator(target, [price])
    config = dsv4_sizing.solve(target, ours, available, dsv4_sizing.draft_padding_bytes([price]))
    return price, ours, (fitted or dsv4_sizing.fitted)(target, ours, config, available, [draft])


def evaluate(
    cell: Launch, tmp: Path, weights: tuple[int, ...] = (), budget: int | None = None
) -> Result:
    """``cell`` sized both ways; ``weights`` and ``budget`` default to the cell's."""
    published = publish(cell, tmp)
    target, (draft,) = published.target, published.drafts
    layout = (target, draft)
    page = int(target.page_size)
    w = Weights(*(weights or cell.weights()))
    budget = cell.budget if budget is None else budget
    price, ours, config = _sized(target, draft, budget - (w.target + w.draft))
    plugin_used = w.target + w.draft + sum(dsv4_sizing.built_pool_bytes(k, config) for k in layout)

    allocated, priced = [], []
    for pages in (5, 10):
        swa = pages * page
        swa_config = MemoryPoolConfig(10 * swa, 1, 10 * swa, swa)
        allocated.append(dsv4_sizing.built_pool_bytes(draft, swa_config))
        priced.append(kv_pool_bytes(price, swa, page))

    stock = create_memory_pool_configurator(target)
    stock_config = dsv4_sizing.solve(target, stock, budget - sum(w), 0)
    stock_pools = [dsv4_sizing.built_pool_bytes(k, stock_config) for k in layout]
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
        stock_used=w.stock_peak(*stock_pools),
        plugin_tokens=int(config.max_total_num_tokens),
        plugin_used=plugin_used,
        coefficient=float(ours.bytes_per_full_token),
    )


matrix = layout_matrix(
    CELLS, evaluate, "SPECINIT_TEST_MATRIX_TABLE",
    ("stock reserves B/row", "draft allocates B/row"),
    lambda r: (f"{r.stock_reserve_per_row:,.1f}", f"{r.draft_per_row:,.1f}"),
)  # fmt: skip


@pytest.mark.parametrize("name", [c.name for c in CELLS])
def test_draft_priced_as_allocated_and_never_worse_than_stock(matrix, name) -> None:
    """The draft is priced as its pool allocates; the plugin fills the budget, beats stock."""
    r = matrix[name]
    (a_small, a_large), (p_small, p_large) = r.allocated, r.priced
    assert a_large - a_small == p_large - p_small
    assert 0 <= a_small - p_small <= 16 << 10  # constant pointer tables only
    # The NextN draft: one SWA layer, nothing that scales with full tokens.
    assert r.draft_price.full_bytes_per_token == 0 < r.draft_price.swa_bytes_per_token
    assert r.stock_reserve_per_row > r.draft_per_row > 0
    assert r.plugin_used <= r.budget
    # Within a few pages: the solve, its SWA split and the step down each floor to pages.
    assert r.budget - r.plugin_used < 8 * r.page * r.coefficient
    if r.stock_used <= r.budget:
        assert r.plugin_tokens >= r.stock_tokens
    assert not r.cap_mode  # every V4-Flash launch sizes in ratio mode
    if name == "V4-Flash MTP, H200 FP8, TP 4":
        # The numbers: 180.4 B reserved per target row against 58.5 B allocated.
        assert round(r.stock_reserve_per_row, 1) == 180.4
        assert r.draft_per_row == 58.5


# An FP8 cell (cap-free ratio mode at SGLang's default 0.1) and one with the ratio flag.
HOOK_CELLS = [CELLS[0], CELLS[5]]


def profile_reading_double(cell: Launch) -> int:
    """TEST DOUBLE of the profiled bytes: the budget minus both weights (duplicates bound)."""
    return cell.budget - (cell.weights().target + cell.weights().draft)


@pytest.fixture
def hooked(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The plugin's ``_resolve_memory_pool_config`` hook, via HookRegistry; the unhooked one."""
    stock = KVCacheConfigurator._resolve_memory_pool_config
    (hook,) = [
        h for h in runtime_budget.HOOKS if h.qualname.endswith("_resolve_memory_pool_config")
    ]
    monkeypatch.setattr(HookRegistry, "_hooks", defaultdict(list))
    monkeypatch.setattr(HookRegistry, "_patched", set())
    monkeypatch.setattr(KVCacheConfigurator, "_resolve_memory_pool_config", stock)
    apply_module_patch(
        ModulePatch(module=hook.module, hooks=(hook,)), __import__(hook.module, fromlist=["_"])
    )
    assert KVCacheConfigurator._resolve_memory_pool_config is not stock
    return stock


@dataclasses.dataclass
class HookRun:
    config: Any
    sizing: Any
    draft: Any
    built: tuple[int, int]  # target pool, draft pool: what SGLang's pool classes own
    # (configurator, config) the hook's solve handed to the step-down (dsv4_sizing.fitted)
    presolve: tuple[Any, Any]
    stock_tokens: int
    expected_tokens: int


def hooked_layout(
    cell: Launch,
    scratch: Path,
    monkeypatch: pytest.MonkeyPatch,
    reading: dict[str, int],
    **more: Any,
) -> tuple[Any, Any, Any]:
    """(target, draft, its sizing state of ``more``); profiling reads ``reading["bytes"]``."""
    layout = publish(cell, scratch)
    target, (draft,) = layout.target, layout.drafts
    target.model = torch.nn.Linear(2, 2)  # stands for the target's weights (read for the report)
    monkeypatch.setattr(
        type(target), "_profile_available_bytes", lambda self, pre: reading["bytes"]
    )
    runner = RunnerDouble(draft, torch.nn.Linear(2, 2))  # the draft's weights
    description = DraftDescription("EAGLE", weight_runners=[runner], pool_runners=[runner])
    return target, draft, TargetSizing(draft=description, **more)


def run_hook(
    cell: Launch,
    scratch: Path,
    stock_method: Any,
    monkeypatch: pytest.MonkeyPatch,
    available: int | None = None,
) -> HookRun:
    w = cell.weights()
    available = profile_reading_double(cell) if available is None else available
    reading = {"bytes": available}
    target, draft, sizing = hooked_layout(
        cell, scratch, monkeypatch, reading, stock_duplicate_bytes=w.duplicates
    )
    # Record what the hook's solve hands the step-down (its answer before any step-down).
    seen: list[tuple[Any, Any]] = []
    step_down = dsv4_sizing.fitted

    def recording(kvc: Any, configurator: Any, config: Any, *args: Any) -> Any:
        seen.append((configurator, config))
        return step_down(kvc, configurator, config, *args)

    monkeypatch.setattr(dsv4_sizing, "fitted", recording)
    with sizing_active(sizing):
        config = target._resolve_memory_pool_config(cell.device_gib)
    (presolve,) = seen
    built = tuple(dsv4_sizing.built_pool_bytes(k, config) for k in (target, draft))
    # What the server's path must have computed (the functions the layout matrix runs).
    expected = _sized(target, draft, available, step_down)[2]
    # Stock: SGLang's own method, no sizing active, profiling with the duplicates resident.
    reading["bytes"] = available - w.duplicates
    stock = stock_method(target, cell.device_gib)
    tokens = (int(stock.max_total_num_tokens), int(expected.max_total_num_tokens))
    return HookRun(config, sizing, draft, built, presolve, *tokens)


@pytest.mark.parametrize("cell", HOOK_CELLS, ids=[c.name for c in HOOK_CELLS])
def test_hook_sizes_with_the_measured_draft_fits_and_beats_stock(
    cell: Launch, hooked: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = run_hook(cell, tmp_path, hooked, monkeypatch)
    plan = run.sizing.plan
    assert plan is not None and plan.rule == "specinit"  # _resolve_dsv4 ran, not stock
    assert run.config.max_total_num_tokens == run.expected_tokens == plan.tokens
    assert sum(run.built) <= profile_reading_double(cell)
    # The breakdown the scheduler logs: the pools as built, the inputs read from the launch.
    assert (plan.target_kv_pool_bytes, plan.draft_kv_pool_bytes) == run.built
    assert plan.budget_bytes == cell.budget
    assert run.sizing.inputs.draft.kv_pools and run.sizing.inputs.page_size == 256
    assert 0 < plan.draft_kv_bytes_per_token < plan.priced_bytes_per_token
    assert plan.max_running_requests == run.config.max_running_requests > 0
    # Never worse than stock, strictly more: it reserves the NextN draft at a target layer's share.
    assert run.config.max_total_num_tokens > run.stock_tokens
    # Before any step-down, the draft is priced as its pools allocate.
    configurator, _config = run.presolve
    term = configurator.bytes_per_full_token - dsv4_sizing.plain_coefficient(configurator)
    assert term > 0
    assert term == pytest.approx(_draft_pool_fit(run.draft, configurator.swa_ratio)[0], rel=1e-9)


def test_launch_policy_prices_a_v4_launch_not_an_older_and_a_failing_solve_keeps_stocks(
    hooked: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cell = HOOK_CELLS[0]
    reading = {"bytes": profile_reading_double(cell)}
    target, _draft, sizing = hooked_layout(cell, tmp_path, monkeypatch, reading)
    runner = RunnerDouble(target, torch.nn.Linear(2, 2))
    assert dsv4_sizing.is_dsv4_configurator(create_memory_pool_configurator(target))
    assert dsv4_sizing.runner_unpriced_reason(runner) is None
    assert not hasattr(runner, "kv_cache_configurator")
    # 0.5.19 / 0.5.20's V4 configurator lacks ``_unified`` / ``encoder_replay``: unpriced.
    reason = dsv4_sizing.unpriced_reason(SimpleNamespace(_unified=False))
    assert reason is not None and "cannot read" in reason and "encoder_replay" in reason
    current = SimpleNamespace(_unified=False, encoder_replay=False, paged_draft_layers=0)
    assert dsv4_sizing.unpriced_reason(current) is None
    broken_solve = mock.Mock(side_effect=RuntimeError("a layout the solve does not expect"))
    monkeypatch.setattr(dsv4_sizing, "solve", broken_solve)
    with sizing_active(sizing):
        config = target._resolve_memory_pool_config(cell.device_gib)
    stock = hooked(target, cell.device_gib)
    assert int(config.max_total_num_tokens) == int(stock.max_total_num_tokens)
    assert sizing.plan is None and sizing.inputs is None


def _draft_pool_fit(draft: Any, ratio: float) -> tuple[float, int]:
    """(bytes per full row, bytes at no rows) of the draft's pools, built at 10 and 20 pages."""
    built = {}
    for swa in (10 * 256, 20 * 256):
        full = round(swa / ratio)
        built[full] = dsv4_sizing.built_pool_bytes(draft, MemoryPoolConfig(full, 1, full, swa))
    (f1, b1), (f2, b2) = built.items()
    return (b2 - b1) / (f2 - f1), b1 - (b2 - b1) * f1 // (f2 - f1)


def test_hook_takes_the_draft_padding_off_and_refuses_pools_that_do_not_fit(
    hooked: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cell = HOOK_CELLS[0]
    layout = publish(cell, tmp_path / "layout")
    target, (draft,) = layout.target, layout.drafts
    price = pool_probe.measure_configurator(draft, pool_probe.target_split(target))
    ours = dsv4_sizing.priced_configurator(target, [price])
    _per_row, padding = _draft_pool_fit(draft, ours.swa_ratio)  # the built pools at no rows
    assert 0 < price.fixed_bytes <= padding <= price.fixed_bytes + (16 << 10)

    def tokens_without_padding(available: int) -> int:
        return int(dsv4_sizing.solve(target, ours, available, 0).max_total_num_tokens)

    high = profile_reading_double(cell)
    count = tokens_without_padding(high)
    low = high - 2 * int(ours.bytes_per_full_token * 256)
    while high - low > 1:  # the smallest budget whose padding-free solve serves `count`
        mid = (low + high) // 2
        low, high = (low, mid) if tokens_without_padding(mid) >= count else (mid, high)
    run = run_hook(cell, tmp_path / "hook", hooked, monkeypatch, available=high)
    _configurator, presolve = run.presolve
    assert int(presolve.max_total_num_tokens) < count  # the padding came off first

    # A launch whose smallest pools do not fit is refused.
    pages = 1
    while True:  # SGLang's smallest accepted count, by its own refusal of smaller ones
        try:
            smallest = ours.calculate_pool_sizes_from_max_tokens(pages * 256, 256)
            break
        except ValueError:
            pages += 1
    smallest.max_running_requests = target.resolve_max_num_reqs(smallest.max_total_num_tokens)
    smallest = ours.finalize_with_max_running_requests(smallest)
    built = sum(dsv4_sizing.built_pool_bytes(kvc, smallest) for kvc in (target, draft))
    with pytest.raises(SpecInitBudgetError, match=r"Pass --mem-fraction-static \d"):
        run_hook(cell, tmp_path / "refused", hooked, monkeypatch, available=built - 1)
