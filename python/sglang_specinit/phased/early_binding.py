"""Early binding of the draft's duplicate embed/lm_head (phased releases): stock binds them after
the target pool was profiled; we run the same methods first and skip stock's later calls once."""

from __future__ import annotations

from typing import Any

from sglang_specinit.hooks import is_instance_of
from sglang_specinit.patch_table import PatchTable

_SKIP_ATTR = "_specinit_skip_once"
EAGLE_MODULE = "sglang.srt.speculative.eagle_worker_v2"
MULTI_LAYER_MODULE = "sglang.srt.speculative.multi_layer_eagle_worker_v2"
STANDALONE_MODULE = "sglang.srt.speculative.standalone_worker_v2"

patch = PatchTable(EAGLE_MODULE)


def _skip_once(draft: Any, name: str) -> bool:
    pending = getattr(draft, _SKIP_ATTR, None)
    if pending and name in pending:
        pending.discard(name)
        return True
    return False


@patch.around("EagleDraftWorker.init_token_map", params=())
def init_token_map(original: Any, self: Any) -> None:
    if _skip_once(self, "init_token_map"):
        return None
    return original(self)


@patch.around("MultiLayerEagleDraftWorker.init_lm_head", params=(), module=MULTI_LAYER_MODULE)
@patch.around("EagleDraftWorker.init_lm_head", params=())
def init_lm_head(original: Any, self: Any) -> None:
    if _skip_once(self, "init_lm_head"):
        return None
    return original(self)


# A StandaloneDraftWorker (an EagleDraftWorker subclass) keeps its own embed/lm_head.
patch.requires("EagleDraftWorker.alloc_memory_pool")
patch.requires("MultiLayerEagleDraftWorker.alloc_memory_pool", module=MULTI_LAYER_MODULE)
patch.requires("StandaloneDraftWorker", module=STANDALONE_MODULE)


def bind_shared_weights_early(spec_worker: Any) -> bool:
    """True if anything was bound."""
    draft = spec_worker.draft_worker
    if is_instance_of(draft, MULTI_LAYER_MODULE, "MultiLayerEagleDraftWorker"):
        draft.init_lm_head()
        setattr(draft, _SKIP_ATTR, {"init_lm_head"})
        return True
    if is_instance_of(draft, EAGLE_MODULE, "EagleDraftWorker") and not is_instance_of(
        draft, STANDALONE_MODULE, "StandaloneDraftWorker"
    ):
        # Stock's order: the binding reads hot_token_id.
        draft.init_token_map()
        draft.init_lm_head()
        setattr(draft, _SKIP_ATTR, {"init_token_map", "init_lm_head"})
        return True
    return False


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
