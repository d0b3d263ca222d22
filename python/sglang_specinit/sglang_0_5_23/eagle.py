"""Early binding of the draft's duplicate embed/lm_head (sglang 0.5.20 - 0.5.23): the core's
table (:mod:`sglang_specinit.phased.early_binding`), re-exported.

0.5.23's ``EagleDraftWorker.alloc_memory_pool`` allocates the draft runner's pool, then calls
``init_token_map`` and ``init_lm_head`` (``speculative/eagle_worker_v2.py:243-258``), after the
target pool was profiled; the core's hooks run both before profiling and skip the later calls
once.
"""

from __future__ import annotations

from sglang_specinit.phased.early_binding import (
    HOOKS,
    NEW_METHODS,
    REQUIRES,
    bind_shared_weights_early,
)

__all__ = ["HOOKS", "NEW_METHODS", "REQUIRES", "bind_shared_weights_early"]
