"""Early binding of the draft's duplicate embed/lm_head (sglang 0.5.14 / 0.5.15).

Wraps ``EagleDraftWorker.init_token_map``, ``EagleDraftWorker.init_lm_head`` and
``MultiLayerEagleDraftWorker.init_lm_head`` with the core's table
(:mod:`sglang_specinit.phased.early_binding`), which this module re-exports.

The methods it relies on are the same in these releases: ``EagleDraftWorker.alloc_memory_pool``
allocates the draft runner's pool, then calls ``init_token_map`` and ``init_lm_head`` in that
order (``speculative/eagle_worker_v2.py:216-231`` in 0.5.14, ``:205-220`` in 0.5.15), after the
target pool was profiled; ``init_lm_head`` binds the target's embed (and lm_head, except for
an EAGLE3 draft with its own) and, for EAGLE3, reads the draft's hot-token map
(``:318-345`` / ``:328-355``). ``StandaloneDraftWorker`` keeps its own weights
(``standalone_worker_v2.py:146`` / ``:149``).
"""

from __future__ import annotations

from sglang_specinit.phased.early_binding import (
    HOOKS,
    NEW_METHODS,
    REQUIRES,
    bind_shared_weights_early,
)

__all__ = ["HOOKS", "NEW_METHODS", "REQUIRES", "bind_shared_weights_early"]
