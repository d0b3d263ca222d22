"""``plan`` predicts what the patched server allocates, and its stock column what stock does:
the tiny EAGLE3 pair (draft ``num_nextn_predict_layers`` unset, 0, 1), plugin on and off."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.launch.engine import DEFAULT_CAPACITY_BYTES, cpu_engine
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S, KINDS
from harness.launch.release_suite import (
    PLAN_KEYS,
    assert_same_numbers,
    eagle3_plan_argv,
    run_planner,
    served_tokens,
)
from harness.matrices.fidelity_probe import PHASES_ITSELF
from harness.releases import installed_row
from harness.reports.report_reading import REPORT_DIR_ENV, read_breakdown
from sglang_specinit.planner.report_cases import cases_from_paths

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TIMEOUT_S * 2)]

RELEASE = getattr(installed_row(), "name", "?")
COMPARED_KEYS = (*PLAN_KEYS, "min_viable_mem_fraction_static")
# 0.5.13.x: this module's own Engines of the pair on a 64 MiB device, page 1 slow (the fidelity
# matrix's (d) checks it), the stock cases slow. 0.5.23: the suite's session launches.
if PHASES_ITSELF:
    CAPACITY = 64 << 20
    PAGES = [16, pytest.param(1, marks=pytest.mark.slow)]
    SLOW_STOCK_CASES = ("EAGLE3", "EAGLE3-nnpl0", "EAGLE3-nnpl1")
else:
    CAPACITY = DEFAULT_CAPACITY_BYTES
    PAGES = [1]
    # The EAGLE3 pair with one field added, the same reserve (CI: the EAGLE3 case).
    SLOW_STOCK_CASES = ("EAGLE3-nnpl1",)
# (draft kind, the draft layers stock 0.5.23 reserves at the target's geometry).
STOCK_CASES = [
    pytest.param(kind, reserved, marks=[pytest.mark.slow] if kind in SLOW_STOCK_CASES else [])
    for kind, reserved in (("EAGLE3", 1), ("EAGLE3-nnpl0", 0), ("EAGLE3-nnpl1", 1))
]


@dataclass(frozen=True)
class Served:
    """One Engine of the pair: what it serves and what the plugin wrote (None: stock)."""

    tokens: int
    memory: dict[str, Any] | None
    page: int
    pre_load_free_bytes: int | None = None
    # The target's KV cell as SGLang priced it (the sglang_0_5_23 generation's report).
    cell: int | None = None
    # Where the plugin's report file is, for ``sglang-specinit report`` (0.5.13.x).
    work: Path | None = None


def pair(kind: str) -> tuple[Path, Path]:
    """``kind``'s target and draft: on 0.5.13.x its own drafts, else the suite's."""
    if not PHASES_ITSELF:
        return KINDS[kind].target(), KINDS[kind].draft()
    nnpl = {"EAGLE3-nnpl0": 0, "EAGLE3-nnpl1": 1}.get(kind)
    key = {} if nnpl is None else {"num_nextn_predict_layers": nnpl}
    return llama_family.tiny_llama_target(), eagle_drafts.tiny_eagle3_draft(**key)


@pytest.fixture(scope="module")
def launched(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., Served]:
    if not PHASES_ITSELF:
        engine_runs = request.getfixturevalue("engine_runs")

        def from_session(kind: str, plugin: bool, page: int = 1) -> Served:
            run = engine_runs(kind, plugin)
            cell = run.runner("target")["sglang_cell_size"]
            return Served(served_tokens(run), run.memory, page, run.pre_load_free_bytes, cell)

        return from_session
    cache: dict[tuple[str, bool, int], Served] = {}

    def own(kind: str, plugin: bool, page: int = 16) -> Served:
        key = (kind, plugin, page)
        if key not in cache:
            work = tmp_path_factory.mktemp(f"{kind}-{'on' if plugin else 'off'}-page{page}")
            target, draft = pair(kind)
            with cpu_engine(
                target,
                draft_model_path=draft,
                algorithm="EAGLE3",
                plugin=plugin,
                capacity_bytes=CAPACITY,
                work_dir=work,
                page_size=page,
                extra_env={REPORT_DIR_ENV: str(work)},
            ) as engine:
                tokens = engine.server_info()["max_total_num_tokens"]
            cache[key] = Served(tokens, read_breakdown(work), page, work=work)
        return cache[key]

    return own


# One planner process per distinct command line in a session (~20 s each).
_plans: dict[tuple[str, ...], dict[str, Any]] = {}


def plan_of(kind: str, run: Served) -> dict[str, Any]:
    assert run.memory is not None
    flags = ("--page-size", str(run.page)) if PHASES_ITSELF else ("--sglang-version", RELEASE)
    argv = eagle3_plan_argv(*pair(kind), run.memory, *flags, device_memory=CAPACITY)
    if tuple(argv) not in _plans:
        _plans[tuple(argv)] = run_planner(argv)
    return _plans[tuple(argv)]


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.launches(("EAGLE3", True))
def test_plan_equals_the_patched_server(launched: Callable[..., Served], page: int) -> None:
    run = launched("EAGLE3", True, page)
    live, planned = run.memory, plan_of("EAGLE3", run)
    assert live is not None and live["tokens"] == run.tokens
    assert planned["sglang_version"] == RELEASE
    assert_same_numbers(planned, live, COMPARED_KEYS)
    # What SGLang really allocated is what both predicted.
    assert live["allocated_target_kv_pool_bytes"] == planned["target_kv_pool_bytes"]
    assert live["allocated_draft_kv_pool_bytes"] == planned["draft_kv_pool_bytes"]
    if run.work is not None:
        # sglang-specinit report reads this server's file as written: planned next to allocated.
        (case,) = cases_from_paths([run.work])
        by_key = {v.key: v.breakdown for v in case.variants}
        assert by_key["rank0-planned"]["tokens"] == live["tokens"]
        allocated = by_key["rank0-allocated"]
        assert allocated["target_kv_pool_bytes"] == live["allocated_target_kv_pool_bytes"]
        assert allocated["draft_kv_pool_bytes"] == live["allocated_draft_kv_pool_bytes"]
        assert "EAGLE3" in case.description


# The stock column is priced, not measured (--resident-bytes measures the plugin run, whose
# draft is resident too), the target's rotary cache included.
@pytest.mark.parametrize(("kind", "reserved"), STOCK_CASES)
@pytest.mark.launches(("{kind}", False), ("{kind}", True))
def test_stock_and_plugin_columns_are_the_servers(
    launched: Callable[..., Served], kind: str, reserved: int
) -> None:
    stock, plugin = launched(kind, False), launched(kind, True)
    assert stock.memory is None and plugin.memory is not None  # stock sizing: nothing written
    planned = plan_of(kind, plugin)
    assert planned["tokens"] == plugin.tokens == plugin.memory["tokens"]
    column = planned["stock"]
    assert column["tokens"] == stock.tokens, (column["tokens"], stock.tokens)
    if PHASES_ITSELF:
        return
    live = plugin.memory
    assert stock.pre_load_free_bytes == plugin.pre_load_free_bytes == live["pre_load_free_bytes"]
    # The cell stock charged: the target's 2 layers of 128 B/token, one more per reserved layer.
    assert column["priced_kv_bytes_per_token"] == stock.cell == 128 * (2 + reserved)
    if kind == "EAGLE3":
        assert column["draft_kv_bytes_per_token"] == 192  # what the draft really allocates
