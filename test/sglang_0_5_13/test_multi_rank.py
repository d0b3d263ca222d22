"""TP 2 on cpu on 0.5.13.post1 beyond ``test/shared/test_tp2_ranks.py``: the same tiny pair via
``sglang.Engine`` plugin on and off (the stock contrast), and PP 2 with a draft, which SGLang's
own argument check refuses."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.checkpoints.eagle_drafts import TP2_EAGLE3_DRAFT
from harness.launch.engine import cpu_engine_kwargs
from harness.launch.tp2_pair import (
    ALGORITHM,
    CAPACITY,
    MULTI_RANK_TIMEOUT_S,
    SPEC_FLAGS,
    own_budget,
    pools_and_resident,
    start_tp2,
)
from harness.reports.report_reading import F, kv_buffer_bytes, runner

pytestmark = [pytest.mark.cpu_engine, pytest.mark.multi_rank]


@pytest.mark.timeout(2 * MULTI_RANK_TIMEOUT_S)  # two launches
@pytest.mark.slow
def test_stock_tp2_overshoots_on_every_rank_and_the_plugin_does_not(tmp_path: Path) -> None:
    stock = start_tp2(tmp_path / "off", launcher="engine", plugin=False)
    phased = start_tp2(tmp_path / "on", launcher="engine", plugin=True)
    assert stock.breakdowns == [] and "[specinit] phase" not in stock.log
    for report in stock.reports.values():
        assert not report["specinit_loaded"]
        # Stock sized the target pool before the draft existed; the draft lands on top.
        both = [runner(report, role) for role in ("target", "draft")]
        assert sum(r["weight_bytes"] + kv_buffer_bytes(r["kv_pool"]) for r in both) > (
            F * CAPACITY * 1.01
        )
    for report in phased.reports.values():
        assert pools_and_resident(report) <= own_budget(report).budget_bytes
    assert phased.served_tokens < stock.served_tokens


PP_REFUSAL = "Pipeline parallelism is not compatible with overlap schedule, speculative decoding"


def _check_server_args(**kwargs: Any) -> tuple[bool, str | None]:
    """``ServerArgs(**kwargs).check_server_args()`` as the launcher runs it: (its overlap-schedule
    switch, the refusal or None)."""
    from sglang.srt.server_args import ServerArgs

    with mock.patch.dict(os.environ):  # the environment as it was, afterwards
        args = ServerArgs(**kwargs)
        try:
            args.check_server_args()
        except AssertionError as exc:
            return args.disable_overlap_schedule, str(exc)
        return args.disable_overlap_schedule, None


def test_pp2_with_a_draft_is_refused_by_sglang_before_any_rank_starts() -> None:
    target = llama_family.tiny_llama_target()
    assert _check_server_args(**cpu_engine_kwargs(target, pp_size=2)) == (True, None)
    with_draft = cpu_engine_kwargs(
        target,
        draft_model_path=eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
        algorithm=ALGORITHM,
        pp_size=2,
        **SPEC_FLAGS,
    )
    assert _check_server_args(**with_draft) == (True, PP_REFUSAL)
