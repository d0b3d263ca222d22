"""Early binding of the draft's duplicate embed/lm_head: the patch table both phased-init
adapters install (their ``eagle`` modules re-export it, with the file:line of their releases).

Wraps ``EagleDraftWorker.init_token_map``, ``EagleDraftWorker.init_lm_head`` and
``MultiLayerEagleDraftWorker.init_lm_head`` (``speculative.eagle_worker_v2``,
``speculative.multi_layer_eagle_worker_v2``).

SGLang's phased init (0.5.14 to 0.5.23) binds an EAGLE/EAGLE3/MTP draft's embed and lm_head to
the target's inside the draft's ``alloc_memory_pool``, after the target pool was profiled: the
draft's own copies are resident while the token count is chosen (about 1 GiB per rank for
Llama-3.1-8B's EAGLE3 draft) and freed right after. :func:`bind_shared_weights_early` runs the
same two SGLang methods before the target pool is profiled. The later stock calls are then
skipped, once each: running ``init_token_map`` again would reset ``hot_token_id`` and lose an
EAGLE3 draft's reduced vocabulary map, and ``init_lm_head`` has nothing left to do. STANDALONE
drafts keep their own embed/lm_head (their ``init_lm_head`` is a no-op); frozen-KV MTP binds in
its constructor.
"""

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
    """AROUND: skipped once after an early binding (it would reset ``hot_token_id``)."""
    if _skip_once(self, "init_token_map"):
        return None
    return original(self)


@patch.around("MultiLayerEagleDraftWorker.init_lm_head", params=(), module=MULTI_LAYER_MODULE)
@patch.around("EagleDraftWorker.init_lm_head", params=())
def init_lm_head(original: Any, self: Any) -> None:
    """AROUND: skipped once after an early binding (the binding is already done)."""
    if _skip_once(self, "init_lm_head"):
        return None
    return original(self)


# The skipped calls are the ones inside the drafts' stock alloc_memory_pool; a
# StandaloneDraftWorker (an EagleDraftWorker subclass) is told apart by its class.
patch.requires("EagleDraftWorker.alloc_memory_pool")
patch.requires("MultiLayerEagleDraftWorker.alloc_memory_pool", module=MULTI_LAYER_MODULE)
patch.requires("StandaloneDraftWorker", module=STANDALONE_MODULE)


def bind_shared_weights_early(spec_worker: Any) -> bool:
    """Bind the draft's embed/lm_head to the target's now; True if anything was bound."""
    draft = spec_worker.draft_worker
    if is_instance_of(draft, MULTI_LAYER_MODULE, "MultiLayerEagleDraftWorker"):
        draft.init_lm_head()
        setattr(draft, _SKIP_ATTR, {"init_lm_head"})
        return True
    if is_instance_of(draft, EAGLE_MODULE, "EagleDraftWorker") and not is_instance_of(
        draft, STANDALONE_MODULE, "StandaloneDraftWorker"
    ):
        # The order of the stock alloc_memory_pool: the token map first, then the binding
        # (which reads hot_token_id).
        draft.init_token_map()
        draft.init_lm_head()
        setattr(draft, _SKIP_ATTR, {"init_token_map", "init_lm_head"})
        return True
    return False


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
