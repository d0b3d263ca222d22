"""What a live sglang 0.5.23 draft worker will put on the device, by kind of allocation.

Read (not patched): ``speculative.base_spec_worker`` (``draft_worker.draft_runners``),
``speculative.frozen_kv_mtp_worker_v2``, ``speculative.multi_layer_eagle_worker_v2``,
``configs.hybrid_arch`` (mamba conv state of the boundary-KV stash).

0.5.23 prices a draft pool as ``eagle_draft_num_layers`` layers of the *target's* geometry.
Here every runner that will own a pool is named (:func:`describe_draft`), and
:mod:`.pool_probe` prices each by building it with 0.5.23's own pool code:

    draft kind              KV pools (token count = target's)   besides
    EAGLE / EAGLE3 / MTP    one per draft runner (1)            -
    multi-layer EAGLE       one per draft runner (num_steps)    boundary-KV stash per request
                                                                row (hybrid-mamba targets)
    STANDALONE              one (the small LM's own layers)     -
    FROZEN_KV_MTP           none                                its 64-token stand-in pool
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.hooks import is_instance_of
from sglang_specinit.live_sizing import DraftDescription

# FrozenKVMTPDraftWorker.alloc_memory_pool gives its runner a pool of this many tokens (the
# same count as 0.5.13's FrozenKVMTPWorker).
from sglang_specinit.model_facts import FROZEN_KV_STAND_IN_TOKENS


def describe_draft(spec_worker: Any) -> DraftDescription:
    """Which runners of a 0.5.23 speculative worker own weights, pools and fixed pools."""
    algorithm = spec_worker.speculative_algorithm.name
    draft = spec_worker.draft_worker
    runners = list(draft.draft_runners)
    frozen = ("sglang.srt.speculative.frozen_kv_mtp_worker_v2", "FrozenKVMTPDraftWorker")
    multi_layer = (
        "sglang.srt.speculative.multi_layer_eagle_worker_v2",
        "MultiLayerEagleDraftWorker",
    )
    if is_instance_of(draft, *frozen):
        return DraftDescription(
            algorithm,
            weight_runners=runners,
            fixed_pools=[(r, FROZEN_KV_STAND_IN_TOKENS) for r in runners],
        )
    description = DraftDescription(algorithm, weight_runners=runners, pool_runners=runners)
    if is_instance_of(draft, *multi_layer):
        description.bytes_per_request = boundary_stash_row_bytes(draft)
    return description


def boundary_stash_row_bytes(draft: Any) -> int:
    """Bytes per request row of a live multi-layer EAGLE draft's boundary-KV stash."""
    runner = draft.draft_runner_list[0]
    return stash_row_bytes(
        draft.target_worker.model_runner.model_config,
        runner.model_config.hidden_size,
        runner.dtype,
        num_steps=draft.speculative_num_steps,
        topk=draft.topk,
    )


def stash_row_bytes(
    target_config: Any, draft_hidden_size: int, draft_dtype: Any, num_steps: int, topk: int
) -> int:
    """Bytes per request row of multi-layer EAGLE's boundary-KV stash (0 when it is off); the
    live adapter and the offline planner both price it here.

    ``MultiLayerEagleDraftWorker._init_boundary_kv_fix_state`` allocates, for every
    req-to-token row, ``front`` token ids (int64), ``front`` hidden states of the draft's
    width and dtype, and one int32 length, where ``front = num_steps - 1 + conv warm-up``. It
    does so only for hybrid-mamba targets, chain drafting (topk 1, more than one step) and
    ``SGLANG_ENABLE_MTP_BOUNDARY_KV_FIX`` (default on); the conv warm-up is the smallest
    per-slot conv-state dimension, read here from the target's mamba cache parameters.
    """
    import torch
    from sglang.srt.configs.hybrid_arch import mambaish_config
    from sglang.srt.speculative.multi_layer_eagle_utils import boundary_kv_fix_enabled

    mambaish = mambaish_config(target_config)
    if not (boundary_kv_fix_enabled() and topk == 1 and num_steps > 1 and mambaish is not None):
        return 0
    if draft_hidden_size != target_config.hidden_size:
        return 0  # upstream disables the fix for this pair
    warmup = min(mambaish.mamba2_cache_params.shape.conv[0])
    front = num_steps - 1 + warmup
    element = torch.empty((), dtype=draft_dtype).element_size()
    return front * 8 + front * draft_hidden_size * element + 4
