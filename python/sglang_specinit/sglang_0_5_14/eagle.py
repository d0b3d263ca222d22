"""Early binding of the draft's duplicate embed/lm_head on 0.5.14 / 0.5.15: the core's table
(:mod:`sglang_specinit.phased.early_binding`), re-exported."""

from __future__ import annotations

from sglang_specinit.phased.early_binding import (
    HOOKS,
    NEW_METHODS,
    REQUIRES,
    bind_shared_weights_early,
)

__all__ = ["HOOKS", "NEW_METHODS", "REQUIRES", "bind_shared_weights_early"]
