"""Early binding of the draft's duplicate embed/lm_head: the core's table, re-exported."""

from __future__ import annotations

from sglang_specinit.phased.early_binding import (
    HOOKS,
    NEW_METHODS,
    REQUIRES,
    bind_shared_weights_early,
)

__all__ = ["HOOKS", "NEW_METHODS", "REQUIRES", "bind_shared_weights_early"]
