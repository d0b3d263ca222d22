"""What a live sglang 0.5.23 draft worker will put on the device, priced at its own geometry.

Read (not patched): ``speculative.base_spec_worker`` (``draft_worker.draft_runners``),
``speculative.frozen_kv_mtp_worker_v2``, ``speculative.multi_layer_eagle_worker_v2``,
``mem_cache.kv_cache_configurator`` / ``configs.hybrid_arch`` (mamba layers, conv state).

0.5.23 prices a draft pool as ``eagle_draft_num_layers`` layers of the *target's* geometry.
Here every runner that will own a pool is priced from its own ``ModelConfig``, KV dtype and
layer count (``specs.kv_spec_from_model_config``, shared with the planner and 0.5.13.x):

    draft kind              KV pools (token count = target's)   besides
    EAGLE / EAGLE3 / MTP    one per draft runner (1)            -
    multi-layer EAGLE       one per draft runner (num_steps)    boundary-KV stash per request
                                                                row (hybrid-mamba targets)
    STANDALONE              one (the small LM's own layers)     -
    FROZEN_KV_MTP           none                                its 64-token stand-in pool
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sglang_specinit.budget import HybridSWAKVSpec, KVSpec, sized_by_target
from sglang_specinit.hooks import is_instance_of
from sglang_specinit.live_sizing import DraftDescription
from sglang_specinit.specs import DRAFT_FULL_ATTENTION_LAYERS, kv_spec_from_model_config

# FrozenKVMTPDraftWorker.alloc_memory_pool gives its runner a pool of this many tokens.
FROZEN_KV_STAND_IN_TOKENS = 64


def runner_kv_spec(runner: Any) -> KVSpec:
    """The KV spec of a live 0.5.23 ModelRunner (weights loaded, KV dtype resolved)."""
    from sglang.srt.configs.hybrid_arch import mambaish_config
    from sglang.srt.runtime_context import get_parallel, get_schedule

    info = runner.layer_info
    full_layers = None
    mambaish = mambaish_config(runner.model_config)
    if mambaish is not None:
        # A hybrid draft's pool holds one full-attention layer (SGLang gives its
        # HybridLinearKVPool the layer ids [0]); a target's, those in its own range.
        full_layers = (
            DRAFT_FULL_ATTENTION_LAYERS
            if runner.is_draft_worker
            else len(
                [
                    i
                    for i in mambaish.full_attention_layer_ids
                    if info.start_layer <= i < info.end_layer
                ]
            )
        )
    spec = kv_spec_from_model_config(
        runner.model_config,
        runner.kv_cache_dtype,
        attn_tp_size=get_parallel().attn_tp_size,
        num_layers=info.num_effective_layers,
        swa_full_tokens_ratio=get_schedule().swa_full_tokens_ratio,
        use_mla=runner.use_mla_backend,
        full_attention_layers=full_layers,
    )
    if isinstance(spec, HybridSWAKVSpec) and info.swa_attention_layer_ids is not None:
        # The layers this runner owns (one MTP block of a multi-layer draft), not the config's.
        spec = replace(
            spec,
            full=replace(spec.full, num_layers=len(info.full_attention_layer_ids or ())),
            swa=replace(spec.swa, num_layers=len(info.swa_attention_layer_ids)),
        )
    return spec


def draft_pool_spec(runner: Any, target_kv: KVSpec) -> KVSpec:
    """A draft runner's pool as the target's config sizes it in 0.5.23.

    A hybrid-SWA MTP draft block (``layer_info.is_hybrid_swa_mtp_draft``) gets its SWA ring at
    the target's *full* token capacity (``KVCacheConfigurator.draft_swa_full_capacity``);
    other drafts follow the target's full/SWA split (``budget.sized_by_target``).
    """
    spec = runner_kv_spec(runner)
    if isinstance(spec, HybridSWAKVSpec) and runner.layer_info.is_hybrid_swa_mtp_draft:
        return replace(spec, swa_follows_ratio=False)
    return sized_by_target(spec, target_kv)


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
    """Bytes per request row of multi-layer EAGLE's boundary-KV stash (0 when it is off).

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

    target_config = draft.target_worker.model_runner.model_config
    mambaish = mambaish_config(target_config)
    if not (
        boundary_kv_fix_enabled()
        and draft.topk == 1
        and draft.speculative_num_steps > 1
        and mambaish is not None
    ):
        return 0
    runner = draft.draft_runner_list[0]
    hidden = runner.model_config.hidden_size
    if hidden != target_config.hidden_size:
        return 0  # upstream disables the fix for this pair
    warmup = min(mambaish.mamba2_cache_params.shape.conv[0])
    front = draft.speculative_num_steps - 1 + warmup
    element = torch.empty((), dtype=runner.dtype).element_size()
    return front * 8 + front * hidden * element + 4
