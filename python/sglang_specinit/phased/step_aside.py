"""Why a launch keeps stock sizing: what every adapter's ``launch_policy.pricing_blocker`` returns
(None: this package prices the draft)."""

from __future__ import annotations

from dataclasses import dataclass

# Devices whose KV pools are the plain ones the budget model prices (NPU builds its own).
PRICED_DEVICES = ("cuda", "musa", "cpu")


@dataclass(frozen=True)
class StepAside:
    """``binds``: the draft's duplicates may still be bound where stock's reserve covers it."""

    reason: str
    warn: bool = True
    binds: bool = False
