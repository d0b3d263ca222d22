"""The fault matrix's refused rows on the installed release, with the plugin on: each launch is
refused in the launcher, with one message, before any rank starts, and ``plan`` on the same
flags refuses it in one line with the same words (the verdict table printed after the run).
Launches SGLang refuses by itself are refused by ``plan`` too, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.checkpoints import llama_family
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S
from harness.launch.multi_rank import assert_ended_cleanly, run_server_to_end
from harness.matrices.plan_verdicts import (
    VERDICT_PROPERTY,
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

# Every row's check and message are unit-tested without a launch (test/unit/test_launch_checks.py).
# End to end one launch costs only the launcher's imports, so CI runs every row at TP 1 on each
# generation (the plan-vs-live table's refused rows) and, on 0.5.13, one flag row at TP 2 (a
# refusal in the launcher happens before any rank exists, so TP only changes the flag); the
# other TP 2 rows run with SPECINIT_TEST_SLOW=1.
IN_CI = {
    "sglang_0_5_13": {*((name, 1) for name in REFUSED), ("mem-fraction-0", 2)},
    "sglang_0_5_23": {(name, 1) for name in REFUSED},
}
TP_SIZES = {"sglang_0_5_13": (1, 2), "sglang_0_5_23": (1,)}


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
    row: str,
    tp: int,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    spec = REFUSED[row]
    draft = spec.make_draft(tmp_path)
    specinit_dir = tmp_path / "specinit"
    specinit_dir.mkdir()
    run = run_server_to_end(
        llama_family.tiny_llama_target(),
        tmp_path / "run",
        bound_s=BOUND_S,
        draft_model_path=draft,
        algorithm=ALGORITHM,
        tp_size=tp,
        extra_env={REPORT_DIR_ENV: str(specinit_dir)},
        **SPEC_FLAGS,
        **spec.flags,
    )
    request.node.user_properties.append(("elapsed_s", round(run.elapsed_s, 1)))
    assert_ended_cleanly(run)
    message = assert_refused_by_the_launcher(run.log, spec, draft)
    request.node.user_properties.append(("message", message))
    # Refused in the launcher: no scheduler rank ever started, so nothing was allocated.
    assert run.reports == []
    assert not list(specinit_dir.iterdir())
    # The planner's verdict on the very launch: refused too, in one line with the same words.
    planned = plan_verdict(launch_flags(draft, tp_size=tp, **spec.flags))
    request.node.user_properties.append(
        (VERDICT_PROPERTY, (f"{row} tp{tp}", planned.verdict(), "refuses"))
    )
    line = planned.refusal_line()
    for needle in spec.expect:
        assert needle.format(draft=draft) in line, (needle, line)


@pytest.mark.parametrize("row", rows_of_this_generation(REFUSED_BY_SGLANG))
def test_what_sglang_refuses_the_planner_refuses(
    row: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    spec = REFUSED_BY_SGLANG[row]
    target, draft = spec.make_target(tmp_path), spec.make_draft(tmp_path)
    run = run_server_to_end(
        target,
        tmp_path / "run",
        bound_s=BOUND_S,
        draft_model_path=draft,
        algorithm=spec.algorithm,
        **{**SPEC_FLAGS, **spec.flags},
    )
    assert_ended_cleanly(run)  # a non-zero exit, nothing left running
    assert spec.live in run.log, run.log[-3000:]
    flags = launch_flags(draft, target=target, algorithm=spec.algorithm, **spec.flags)
    planned = plan_verdict(flags)
    request.node.user_properties.append((VERDICT_PROPERTY, (row, planned.verdict(), "refuses")))
    assert spec.planned in planned.refusal_line()
