"""Accepted drafts, read from what SGLang 0.5.13.post1 puts in a ``/generate`` response."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

# meta_info keys SGLang 0.5.13.post1 sets for a finished speculative request.
VERIFY_STEPS_KEY = "spec_verify_ct"
CORRECT_DRAFTS_KEY = "spec_num_correct_drafts"
PROPOSED_DRAFTS_KEY = "spec_num_proposed_drafts"


class MissingSpeculativeMetrics(ValueError):
    """A response carries no speculative counters: no verify step ran for it."""


@dataclass(frozen=True)
class DraftStats:
    completion_tokens: int
    verify_steps: int
    correct_drafts: int
    proposed_drafts: int

    @classmethod
    def from_meta_info(cls, meta: Mapping[str, Any]) -> DraftStats:
        missing = [k for k in (VERIFY_STEPS_KEY, CORRECT_DRAFTS_KEY) if k not in meta]
        if missing:
            raise MissingSpeculativeMetrics(
                f"meta_info has no {', '.join(missing)}: SGLang ran no speculative verify step "
                f"for this request (or the server is not speculative). meta_info: {dict(meta)}"
            )
        return cls(
            completion_tokens=int(meta["completion_tokens"]),
            verify_steps=int(meta[VERIFY_STEPS_KEY]),
            correct_drafts=int(meta[CORRECT_DRAFTS_KEY]),
            proposed_drafts=int(meta.get(PROPOSED_DRAFTS_KEY, 0)),
        )

    @property
    def accept_rate(self) -> float:
        return self.correct_drafts / self.proposed_drafts if self.proposed_drafts else 0.0

    def __add__(self, other: DraftStats) -> DraftStats:
        return DraftStats(
            self.completion_tokens + other.completion_tokens,
            self.verify_steps + other.verify_steps,
            self.correct_drafts + other.correct_drafts,
            self.proposed_drafts + other.proposed_drafts,
        )


def summed(responses: Iterable[Mapping[str, Any]]) -> DraftStats:
    total = DraftStats(0, 0, 0, 0)
    for response in responses:
        total = total + DraftStats.from_meta_info(response["meta_info"])
    return total


def sglang_meta_info(
    completion_tokens: int, verify_ct: int, correct: int, num_draft_tokens: int
) -> dict[str, Any]:
    """The ``meta_info`` SGLang writes for one finished speculative request with these
    counters, by ``TokenizerManager._calculate_spec_decoding_metrics`` itself."""
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    manager = SimpleNamespace(
        server_args=SimpleNamespace(speculative_num_draft_tokens=num_draft_tokens)
    )
    batch_output = SimpleNamespace(
        spec_verify_ct=[verify_ct],
        spec_num_correct_drafts=[correct],
        completion_tokens=[completion_tokens],
        spec_correct_drafts_histogram=[[verify_ct - correct, correct]] if verify_ct else [[]],
    )
    meta: dict[str, Any] = {"completion_tokens": completion_tokens}
    # 0.5.23 reads the draft-token count from runtime_context's get_spec.
    module = sys.modules[TokenizerManager.__module__]
    published = getattr(module, "get_spec", None)
    if published is not None:
        module.get_spec = lambda: manager.server_args  # type: ignore[attr-defined]
    try:
        TokenizerManager._calculate_spec_decoding_metrics(manager, meta, batch_output, 0)
    finally:
        if published is not None:
            module.get_spec = published  # type: ignore[attr-defined]
    return meta
