"""The fault matrix's refused rows, plugin on: refused in the launcher (or by SGLang) before any
rank starts, and by ``plan`` on the same flags in one line with the same words."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from harness.launch.engine import assert_ended_cleanly, run_server_to_end
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S
from harness.matrices.plan_verdicts import (
    REFUSED,
    REFUSED_BY_SGLANG,
    SPEC_FLAGS,
    TABLES,
    VERDICT_PROPERTY,
    assert_refusal,
    assert_refused_by_the_launcher,
    launch_verdict,
    rows_of_this_generation,
)
from harness.releases import installed_row
from harness.reports.report_reading import REPORT_DIR_ENV

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TIMEOUT_S * 2)]

# CI runs every row at TP 1 and, on 0.5.13 (TP 2 there), this flag row at TP 2 (a refusal in
# the launcher happens before any rank exists); the other TP 2 rows are slow.
IN_CI_AT_TP2 = "mem-fraction-0"
TP_SIZES = {"sglang_0_5_13": (1, 2), "sglang_0_5_23": (1,)}

# Without xdist workers (the 0.5.23 suite) the module's launches run two at a time.
_pool = ThreadPoolExecutor(1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)


def _start(table: str, name: str, tp: int | None, work: Path) -> tuple[Any, ...]:
    """The launch's target, draft, work directory and (started) ``run_server_to_end`` future."""
    spec = TABLES[table][name]
    (work / "specinit").mkdir(parents=True)
    target, draft = spec.make_target(work), spec.make_draft(work)
    run = _pool.submit(
        run_server_to_end,
        target,
        work / "run",
        bound_s=float(ENGINE_TIMEOUT_S),
        draft_model_path=draft,
        algorithm=spec.algorithm,
        extra_env={REPORT_DIR_ENV: str(work / "specinit")},
        # The launcher rows' launch names its TP size; SGLang's rows launch as they are.
        **{**SPEC_FLAGS, **({"tp_size": tp} if tp else {}), **spec.flags},
    )
    return target, draft, work, run


@pytest.fixture(scope="module")
def refused(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``refused(*params)``: that test's launch; every collected test's started up front."""
    launches: dict[tuple[Any, ...], Any] = {}
    for item in request.session.items:
        if item.module is not request.module or item.get_closest_marker("skip"):
            continue
        params = tuple(item.callspec.params.values())
        launches[params] = _start(*params, tmp_path_factory.mktemp("refused"))
    return lambda *key: launches[key]


def refused_cases() -> list[object]:
    adapter = getattr(installed_row(), "adapter", None)
    if adapter not in TP_SIZES:
        return []
    launcher = [
        pytest.param("launcher", name, tp, id=f"{name}-{tp}", marks=marks)
        for name in sorted(REFUSED)
        for tp, marks in (
            (1, []),
            (2, [pytest.mark.multi_rank, *([] if name == IN_CI_AT_TP2 else [pytest.mark.slow])]),
        )
        if tp in TP_SIZES[adapter]
    ]
    return launcher + [
        pytest.param("sglang", name, None, id=name, marks=[] if spec.in_ci else [pytest.mark.slow])
        for name, spec in REFUSED_BY_SGLANG.items()
        if name in rows_of_this_generation(REFUSED_BY_SGLANG)
    ]


@pytest.mark.parametrize(("table", "row", "tp"), refused_cases())
def test_refused_launch_and_its_plan(
    table: str, row: str, tp: int | None, refused: Any, request: pytest.FixtureRequest
) -> None:
    spec = TABLES[table][row]
    target, draft, work, future = refused(table, row, tp)
    run = future.result()
    request.node.user_properties.append(("elapsed_s", round(run.elapsed_s, 1)))
    assert_ended_cleanly(run)
    if table == "sglang":
        assert spec.live in run.log, run.log[-3000:]
    else:
        message = assert_refused_by_the_launcher(run.log, spec, draft)
        request.node.user_properties.append(("message", message))
        # Refused in the launcher: no scheduler rank ever started, so nothing was allocated.
        assert run.reports == []
        assert not list((work / "specinit").iterdir())
    planned = launch_verdict(spec, draft, target, **({"tp_size": tp} if tp else {}))
    label = f"{row} tp{tp}" if tp else row
    request.node.user_properties.append((VERDICT_PROPERTY, (label, planned.verdict(), "refuses")))
    assert_refusal(planned, spec.expect, draft)
