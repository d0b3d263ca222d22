"""Reading accepted drafts from a ``/generate`` response (:mod:`harness.gpu.spec_metrics`)."""

from __future__ import annotations

import functools

import pytest
from harness.gpu import spec_metrics
from harness.gpu.spec_metrics import DraftStats, MissingSpeculativeMetrics, summed

# The spec part of a finished request's meta_info, as SGLang's tokenizer manager writes it, at
# the GPU suite's chain cases' --speculative-num-draft-tokens.
sglang_meta_info = functools.partial(spec_metrics.sglang_meta_info, num_draft_tokens=4)


def test_accepted_drafts_are_read_from_sglang_keys() -> None:
    meta = sglang_meta_info(completion_tokens=64, verify_ct=20, correct=43)
    stats = DraftStats.from_meta_info(meta)
    assert stats == DraftStats(
        completion_tokens=64, verify_steps=20, correct_drafts=43, proposed_drafts=60
    )
    assert stats.accept_rate == pytest.approx(43 / 60)


def test_zero_accepted_drafts_is_visible_although_accept_length_exceeds_one() -> None:
    # 64 tokens, no draft ever accepted: one prefill token + one bonus token per verify step.
    meta = sglang_meta_info(completion_tokens=64, verify_ct=63, correct=0)
    assert meta["spec_accept_length"] > 1.0  # what the old check asserted: passes anyway
    assert DraftStats.from_meta_info(meta).correct_drafts == 0


def test_a_response_without_verify_steps_is_an_error() -> None:
    meta = sglang_meta_info(completion_tokens=1, verify_ct=0, correct=0)
    assert "spec_verify_ct" not in meta  # SGLang leaves the keys out
    with pytest.raises(MissingSpeculativeMetrics, match="no speculative verify step"):
        DraftStats.from_meta_info(meta)


def test_summed_over_responses() -> None:
    responses = [
        {"meta_info": sglang_meta_info(64, 20, 43)},
        {"meta_info": sglang_meta_info(32, 30, 1)},
    ]
    total = summed(responses)
    assert (total.completion_tokens, total.verify_steps, total.correct_drafts) == (96, 50, 44)
    assert total.proposed_drafts == 150
