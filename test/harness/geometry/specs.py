"""Turn sglang 0.5.13.x ``ModelConfig`` objects (or a live runner's) into geometric KV specs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sglang_specinit.budget import KVSpec
from sglang_specinit.model_facts import (
    FROZEN_KV_STAND_IN_TOKENS,
    check_supported,
    element_bytes,
    is_linear_attention_hybrid,
    kv_dtype_name,
    runner_layer_count,
    torch_dtype,
)

from harness.geometry.kv_specs import AttentionKVSpec, HybridSWAKVSpec

# Full-attention layers in the KV pool of a mamba/linear-attention hybrid's draft
# (_init_pools gives a draft runner's HybridLinearKVPool the layer ids [0]).
DRAFT_FULL_ATTENTION_LAYERS = 1


def attention_kv_spec(**fields: Any) -> AttentionKVSpec:
    """An :class:`AttentionKVSpec` whose element size is the one torch stores ``kv_dtype`` with."""
    fields.setdefault("kv_dtype", "bfloat16")
    return AttentionKVSpec(element_bytes=element_bytes(fields["kv_dtype"]), **fields)


def kv_spec_from_model_config(
    model_config: Any,
    kv_dtype: Any,
    attn_tp_size: int,
    num_layers: int,
    swa_full_tokens_ratio: float,
    use_mla: bool | None = None,
    full_attention_layers: int | None = None,
    server_args: Any = None,
) -> KVSpec:
    """The per-token KV spec of one ModelRunner's pool."""
    from sglang.srt.configs.model_config import (
        AttentionArch,
        get_dsa_index_head_dim,
        is_deepseek_dsa,
    )

    dtype = kv_dtype_name(kv_dtype)
    elt = element_bytes(kv_dtype)
    check_supported(model_config.hf_config)
    if use_mla is None:
        use_mla = model_config.attention_arch == AttentionArch.MLA
    mc = model_config

    def mha(layers: int, heads: int, head_dim: int, v_head_dim: int) -> AttentionKVSpec:
        shape = {"num_kv_heads": heads, "head_dim": head_dim, "v_head_dim": v_head_dim}
        return AttentionKVSpec(num_layers=layers, kv_dtype=dtype, element_bytes=elt, **shape)

    if mc.is_hybrid_swa:
        full_layers, swa_layers = len(mc.full_attention_layer_ids), len(mc.swa_attention_layer_ids)
        full = mha(full_layers, mc.get_num_kv_heads(attn_tp_size), mc.head_dim, mc.v_head_dim)
        swa_heads = mc.get_swa_num_kv_heads(attn_tp_size)
        swa = mha(swa_layers, swa_heads, mc.swa_head_dim, mc.swa_v_head_dim)
        return HybridSWAKVSpec(full=full, swa=swa, swa_full_tokens_ratio=swa_full_tokens_ratio)
    layers = full_attention_layers if full_attention_layers is not None else num_layers
    if use_mla:
        dsa = is_deepseek_dsa(mc.hf_config)
        return AttentionKVSpec(
            num_layers=layers,
            kv_dtype=dtype,
            element_bytes=elt,
            mla_cache_dim=0 if server_args is None else _mla_cache_dim(mc, kv_dtype, server_args),
            kv_lora_rank=mc.kv_lora_rank,
            qk_rope_head_dim=mc.qk_rope_head_dim,
            dsa_index_head_dim=get_dsa_index_head_dim(mc.hf_config) if dsa else 0,
        )
    return mha(layers, mc.get_num_kv_heads(attn_tp_size), mc.head_dim, mc.v_head_dim)


def _mla_cache_dim(model_config: Any, kv_dtype: Any, server_args: Any) -> int:
    """SGLang's per-layer MLA pool width; 0 when it is ``kv_lora_rank + qk_rope_head_dim``
    (DSA with an FP8 cache stores scales and a bf16 rope)."""
    from sglang.srt.model_executor.model_runner_kv_cache_mixin import ModelRunnerKVCacheMixin

    reader = SimpleNamespace(
        model_config=model_config, kv_cache_dtype=torch_dtype(kv_dtype), server_args=server_args
    )
    dim = ModelRunnerKVCacheMixin.calculate_mla_kv_cache_dim(reader)
    return 0 if dim == model_config.kv_lora_rank + model_config.qk_rope_head_dim else int(dim)


def draft_kv_pools(
    algorithm: str,
    draft_model_config: Any,
    kv_dtype: Any,
    attn_tp_size: int,
    swa_full_tokens_ratio: float,
    num_steps: int = 1,
    multi_layer_eagle: bool = False,
    server_args: Any = None,
) -> tuple[KVSpec, ...]:
    """The KV pools a draft worker will allocate, each at the draft's own geometry and dtype."""
    if algorithm in ("FROZEN_KV_MTP", "NGRAM") or draft_model_config is None:
        return ()
    pool = kv_spec_from_model_config(
        draft_model_config,
        kv_dtype,
        attn_tp_size=attn_tp_size,
        num_layers=runner_layer_count(draft_model_config, is_draft=True),
        swa_full_tokens_ratio=swa_full_tokens_ratio,
        full_attention_layers=(
            DRAFT_FULL_ATTENTION_LAYERS if is_linear_attention_hybrid(draft_model_config) else None
        ),
        server_args=server_args,
    )
    # Multi-layer EAGLE builds one ModelRunner per step, each owning a pool of its own.
    copies = num_steps if multi_layer_eagle else 1
    return (pool,) * copies


def draft_extra_bytes(
    algorithm: str,
    draft_model_config: Any,
    target_model_config: Any,
    kv_dtype: Any,
    attn_tp_size: int,
    swa_full_tokens_ratio: float,
    page_size: int,
    num_steps: int = 1,
    multi_layer_eagle: bool = False,
) -> tuple[int, int]:
    """(bytes per request row, fixed bytes) a draft allocates besides token-sized KV pools."""
    from sglang_specinit.budget import kv_pool_bytes

    per_request = 0
    if multi_layer_eagle and algorithm != "FROZEN_KV_MTP":
        element = element_bytes(target_model_config.dtype)
        per_request = (num_steps - 1) * target_model_config.hidden_size * element
    fixed = 0
    if algorithm == "FROZEN_KV_MTP" and draft_model_config is not None:
        stand_in = kv_spec_from_model_config(
            draft_model_config,
            kv_dtype,
            attn_tp_size=attn_tp_size,
            num_layers=runner_layer_count(draft_model_config, is_draft=True),
            swa_full_tokens_ratio=swa_full_tokens_ratio,
        )
        fixed = kv_pool_bytes(stand_in, FROZEN_KV_STAND_IN_TOKENS, page_size)
    return per_request, fixed


def kv_spec_for_runner(model_runner: Any) -> KVSpec:
    """The KV spec of a live ModelRunner whose weights are loaded and KV dtype resolved."""
    from sglang.srt.layers.dp_attention import get_attention_tp_size

    full_layers = None
    mambaish = model_runner.mambaish_config
    if mambaish is not None:
        # A hybrid draft's pool holds one full-attention layer (layer 0 of its own pool).
        if model_runner.is_draft_worker:
            full_layers = DRAFT_FULL_ATTENTION_LAYERS
        else:
            start, end = model_runner.start_layer, model_runner.end_layer
            full_layers = sum(start <= i < end for i in mambaish.full_attention_layer_ids)
    return kv_spec_from_model_config(
        model_runner.model_config,
        model_runner.kv_cache_dtype,
        attn_tp_size=get_attention_tp_size(),
        num_layers=model_runner.num_effective_layers,
        swa_full_tokens_ratio=model_runner.server_args.swa_full_tokens_ratio,
        use_mla=model_runner.use_mla_backend,
        full_attention_layers=full_layers,
        server_args=model_runner.server_args,
    )
