"""Which runners of a live 0.5.23 draft worker own weights, KV pools and fixed pools.

:mod:`.pool_probe` prices each pool by building it; multi-layer EAGLE adds its boundary-KV
stash per request row, frozen-KV MTP owns only its 64-token stand-in pool.
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.hooks import is_instance_of
from sglang_specinit.live_sizing import DraftDescription
from sglang_specinit.model_facts import FROZEN_KV_STAND_IN_TOKENS


def describe_draft(spec_worker: Any) -> DraftDescription:
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
    """Bytes per request row of multi-layer EAGLE's boundary-KV stash (0 when it is off), for
    the server and the planner: ``front`` ids (int64) and hidden states plus an int32 length."""
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
