"""Why a launch keeps stock sizing: the answer every adapter's launch policy gives.

Each adapter's ``launch_policy.pricing_blocker(scheduler)`` returns None when this package
prices the launch's draft, else a :class:`StepAside` naming why not; the scheduler hook logs
it once (WARNING, or INFO where there is nothing to price) and runs SGLang's method unchanged.
Where ``binds`` is set the draft is a known worker whose stock sizing stays, and the scheduler
first binds its duplicate embed/lm_head where stock's reserve covers the draft
(:mod:`sglang_specinit.phased.stock_binding`).
"""

from __future__ import annotations

from dataclasses import dataclass

# Devices whose KV pools are the plain ones the budget model prices (NPU builds its own).
PRICED_DEVICES = ("cuda", "musa", "cpu")


@dataclass(frozen=True)
class StepAside:
    """Why a speculative launch keeps stock sizing; ``warn`` picks the log level; ``binds``:
    the draft's duplicate embed/lm_head may still be bound before stock profiles."""

    reason: str
    warn: bool = True
    binds: bool = False
