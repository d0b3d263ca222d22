"""The fault matrix's refused rows on the installed release, with the plugin on: each launch is
refused in the launcher, with one message, before any rank starts, and ``plan`` on the same
flags refuses it in one line with the same words (the verdict table printed after the run).
Launches SGLang refuses by itself are refused by ``plan`` too, in one line."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints import llama_family
from harness.launch.engine import EndedLaunch, assert_ended_cleanly, run_server_to_end
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S
from harness.matrices.plan_verdicts import (
    VERDICT_PROPERTY,
    assert_refusal,
    launch_flags,
    plan_verdict,
    rows_of_this_generation,
)
from harness.matrices.refused_launches import (
    ALGORITHM,
    REFUSED,
    REFUSED_BY_SGLANG,
    SPEC_FLAGS,
    assert_refused_by_the_launcher,
)
from harness.releases import installed_row
from harness.reports.report_reading import REPORT_DIR_ENV

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TIMEOUT_S * 2)]

BOUND_S = float(ENGINE_TIMEOUT_S)

# CI runs every row at TP 1 on each generation and, on 0.5.13, one flag row at TP 2 (a refusal
# in the launcher happens before any rank exists); the other TP 2 rows are slow.
IN_CI = {
    "sglang_0_5_13": {*((name, 1) for name in REFUSED), ("mem-fraction-0", 2)},
    "sglang_0_5_23": {(name, 1) for name in REFUSED},
}
TP_SIZES = {"sglang_0_5_13": (1, 2), "sglang_0_5_23": (1,)}

# Without xdist workers (the 0.5.23 suite) the module's launches run two at a time.
_pool = ThreadPoolExecutor(1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)


@dataclass(frozen=True)
class Refused:

    target: Path
    draft: Path | None
    work: Path
    run: Future[EndedLaunch]


def _start(work: Path, target: Path, draft: Path | None, **server_args: Any) -> Refused:
    work.mkdir(parents=True, exist_ok=True)
    run = _pool.submit(
        run_server_to_end,
        target,
        work / "run",
        bound_s=BOUND_S,
        draft_model_path=draft,
        **server_args,
    )
    return Refused(target, draft, work, run)


def _launcher_row(name: str, tp: int, work: Path) -> Refused:
    (work / "specinit").mkdir(parents=True)
    return _start(
        work,
        llama_family.tiny_llama_target(),
        REFUSED[name].make_draft(work),
        algorithm=ALGORITHM,
        tp_size=tp,
        extra_env={REPORT_DIR_ENV: str(work / "specinit")},
        **{**SPEC_FLAGS, **REFUSED[name].flags},
    )


def _sglang_row(name: str, work: Path) -> Refused:
    spec = REFUSED_BY_SGLANG[name]
    return _start(
        work,
        spec.make_target(work),
        spec.make_draft(work),
        algorithm=spec.algorithm,
        **{**SPEC_FLAGS, **spec.flags},
    )


@pytest.fixture(scope="module")
def refused(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``refused(test_name, *params)``: that test's launch, every launch of the module's
    collected (not skipped) tests started up front."""
    starters: dict[str, Callable[..., Refused]] = {
        "test_refused_in_the_launcher_before_any_rank_starts": _launcher_row,
        "test_what_sglang_refuses_the_planner_refuses": _sglang_row,
    }
    launches: dict[tuple[Any, ...], Refused] = {}
    for item in request.session.items:
        name = getattr(item, "originalname", None)
        if name not in starters or item.module is not request.module:
            continue
        if not item.get_closest_marker("skip"):
            params = tuple(item.callspec.params.values())
            work = tmp_path_factory.mktemp(name[5:20])
            launches[(name, *params)] = starters[name](*params, work)
    return lambda *key: launches[key]


def refused_cases() -> list[object]:
    row = installed_row()
    if row is None or row.adapter not in TP_SIZES:
        return []
    in_ci = IN_CI[row.adapter]
    return [
        pytest.param(
            name,
            tp,
            id=f"{name}-{tp}",
            marks=[
                *(() if (name, tp) in in_ci else (pytest.mark.slow,)),
                *((pytest.mark.multi_rank,) if tp > 1 else ()),
            ],
        )
        for name in sorted(REFUSED)
        for tp in TP_SIZES[row.adapter]
    ]


@pytest.mark.parametrize(("row", "tp"), refused_cases())
def test_refused_in_the_launcher_before_any_rank_starts(
    row: str, tp: int, refused: Any, request: pytest.FixtureRequest
) -> None:
    spec = REFUSED[row]
    launch = refused("test_refused_in_the_launcher_before_any_rank_starts", row, tp)
    run, draft = launch.run.result(), launch.draft
    request.node.user_properties.append(("elapsed_s", round(run.elapsed_s, 1)))
    assert_ended_cleanly(run)
    message = assert_refused_by_the_launcher(run.log, spec, draft)
    request.node.user_properties.append(("message", message))
    # Refused in the launcher: no scheduler rank ever started, so nothing was allocated.
    assert run.reports == []
    assert not list((launch.work / "specinit").iterdir())
    # The planner's verdict on the very launch: refused too, in one line with the same words.
    planned = plan_verdict(launch_flags(draft, tp_size=tp, **spec.flags))
    request.node.user_properties.append(
        (VERDICT_PROPERTY, (f"{row} tp{tp}", planned.verdict(), "refuses"))
    )
    assert_refusal(planned, spec.expect, draft)


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(name, marks=() if REFUSED_BY_SGLANG[name].in_ci else pytest.mark.slow)
        for name in rows_of_this_generation(REFUSED_BY_SGLANG)
    ],
)
def test_what_sglang_refuses_the_planner_refuses(
    row: str, refused: Any, request: pytest.FixtureRequest
) -> None:
    spec = REFUSED_BY_SGLANG[row]
    launch = refused("test_what_sglang_refuses_the_planner_refuses", row)
    run = launch.run.result()
    assert_ended_cleanly(run)  # a non-zero exit, nothing left running
    assert spec.live in run.log, run.log[-3000:]
    flags = launch_flags(launch.draft, target=launch.target, algorithm=spec.algorithm, **spec.flags)
    planned = plan_verdict(flags)
    request.node.user_properties.append((VERDICT_PROPERTY, (row, planned.verdict(), "refuses")))
    assert spec.planned in planned.refusal_line()
