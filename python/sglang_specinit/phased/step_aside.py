"""Why a launch keeps stock sizing: what every adapter's ``launch_policy.pricing_blocker`` returns
(None: this package prices the draft)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

# Devices whose KV pools are the plain ones the budget model prices (NPU builds its own).
PRICED_DEVICES = ("cuda", "musa", "cpu")


@dataclass(frozen=True)
class StepAside:
    """``binds``: the draft's duplicates may still be bound where stock's reserve covers it."""

    reason: str
    warn: bool = True
    binds: bool = False


def holds_draft(scheduler: Any) -> bool:
    spec_worker = scheduler.draft_worker
    return spec_worker is not None and getattr(spec_worker, "draft_worker", None) is not None


def known_spec_worker(scheduler: Any, known: Collection[tuple[str, str]]) -> bool:
    """True if the draft worker is exactly one of ``known`` (a subclass may allocate more)."""
    worker = type(scheduler.draft_worker)
    return holds_draft(scheduler) and (worker.__module__, worker.__qualname__) in known
