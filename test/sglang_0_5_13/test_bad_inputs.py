"""Bad launches fail with a message that says what to change, before any KV pool exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints import eagle_drafts
from harness.launch.engine import ENGINE_TEST_TIMEOUT_S, SGLangStartError, cpu_engine
from harness.matrices.plan_verdicts import VERDICT_PROPERTY, launch_flags, plan_verdict
from harness.reports.report_reading import REPORT_DIR_ENV

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S)]


def refusals(
    request: pytest.FixtureRequest, case: str, target: Path, draft: Path, work_dir: Path, **kw: Any
) -> tuple[SGLangStartError, str]:
    """An EAGLE launch with the plugin that must not start, and ``plan``'s refusal line for the
    same flags (its verdict recorded as ``case``)."""
    with (
        pytest.raises(SGLangStartError) as failure,
        cpu_engine(
            target, draft_model_path=draft, algorithm="EAGLE", plugin=True, work_dir=work_dir, **kw
        ),
    ):
        pytest.fail("the Engine came up")
    fraction = {k: v for k, v in kw.items() if k == "mem_fraction_static"}
    planned = plan_verdict(launch_flags(draft, target=target, algorithm="EAGLE", **fraction))
    request.node.user_properties.append((VERDICT_PROPERTY, (case, planned.verdict(), "refuses")))
    return failure.value, planned.refusal_line()


def test_fraction_below_minimum_viable_is_refused_with_a_suggestion(
    tiny_target: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # 2 % of the 256 MiB simulated device is less than the two models' weights.
    fraction = 0.02
    specinit_dir = tmp_path / "specinit"
    specinit_dir.mkdir()
    failure, refusal = refusals(
        request,
        "eagle-fraction-0.02",
        tiny_target,
        eagle_drafts.tiny_eagle_draft(),  # 1 layer, the target's hidden/vocab and KV geometry
        tmp_path,
        mem_fraction_static=fraction,
        extra_env={REPORT_DIR_ENV: str(specinit_dir)},
    )
    error = failure.scheduler_error
    assert error is not None, str(failure)
    assert "SpecInitBudgetError" in error
    assert f"--mem-fraction-static={fraction}" in error
    minimum = float(re.search(r"minimum viable (\d+\.\d+)", error).group(1))
    suggested_text = re.search(r"Pass --mem-fraction-static (\d+\.\d+) or more", error).group(1)
    assert fraction < minimum <= float(suggested_text) < minimum + 0.0011

    # Failed in the pool phase, after both models loaded, before any pool was allocated.
    (report,) = failure.reports
    assert report["specinit_loaded"]
    assert sorted(r["role"] for r in report["model_runners"]) == ["draft", "target"]
    assert all(r["kv_pool"] is None for r in report["model_runners"])
    callers = [r["caller"] for r in report["meter"]["readings"]]
    assert callers[-1].endswith("._profile_available_bytes")
    assert not any(c.endswith(".init_memory_pool") for c in callers)
    assert not list(specinit_dir.glob("memory-rank*.json"))
    # ``plan`` on the very launch refuses it too, in one line with the same suggestion: the
    # plan's draft weights are the draft's own (its stored embedding, named without the
    # ``model.`` prefix, is the target's at run time).
    assert f"Pass --mem-fraction-static {suggested_text} or more" in refusal


def test_empty_draft_directory_names_the_flag(
    tiny_target: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    empty = tmp_path / "empty-draft"
    empty.mkdir()
    failure, line = refusals(request, "eagle-empty-draft-dir", tiny_target, empty, tmp_path / "run")
    message = str(failure)
    assert "--speculative-draft-model-path" in message
    assert str(empty) in message and "config.json" in message
    # Refused while parsing the arguments: no scheduler (hence no pool) was ever started.
    assert failure.reports == []
    assert "Unrecognized model" not in message
    assert "--speculative-draft-model-path" in line and str(empty) in line, line
