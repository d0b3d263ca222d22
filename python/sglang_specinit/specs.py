"""Turn SGLang ``ModelConfig`` objects into the budget model's KV specs (sglang 0.5.13.x).

The runtime patch calls these with the live ``ModelRunner``'s config and resolved KV dtype; the
offline planner calls them with a ``ModelConfig`` built from local paths. Both therefore price a
model with the same code, and both read geometry through SGLang's own ``ModelConfig`` so derived
values (head_dim of MLA models, SWA layer ids, KV heads per TP rank) are SGLang's.
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.budget import AttentionKVSpec, BudgetError, HybridSWAKVSpec, KVSpec

# Drafts whose runner allocates exactly one KV layer whatever their config says
# (ModelRunner.initialize special-cases these architectures in 0.5.13.post1).
ONE_LAYER_DRAFT_ARCHS = frozenset({"MiMoV2MTP", "Step3p5MTP"})
# Full-attention layers in the KV pool of a mamba/linear-attention hybrid's draft
# (_init_pools gives a draft runner's HybridLinearKVPool the layer ids [0]).
DRAFT_FULL_ATTENTION_LAYERS = 1


def kv_dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``; strings pass through."""
    return str(dtype).removeprefix("torch.")


def torch_dtype(dtype: Any) -> Any:
    """A torch dtype from a torch dtype or its name (``"float8_e4m3fnuz"``)."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    resolved = getattr(torch, kv_dtype_name(dtype), None)
    if not isinstance(resolved, torch.dtype):
        raise BudgetError(f"{dtype!r} is not a torch dtype this torch build knows")
    return resolved


def element_bytes(dtype: Any) -> int:
    """Stored bytes of one element of ``dtype``, as torch allocates it."""
    return int(torch_dtype(dtype).itemsize)


def attention_kv_spec(**fields: Any) -> AttentionKVSpec:
    """An :class:`AttentionKVSpec` whose element size is the one torch stores ``kv_dtype`` with."""
    fields.setdefault("kv_dtype", "bfloat16")
    return AttentionKVSpec(element_bytes=element_bytes(fields["kv_dtype"]), **fields)


def runner_layer_count(model_config: Any, is_draft: bool) -> int:
    """KV layers a ModelRunner allocates for this config (pp_size == 1).

    Same rule as ``ModelRunner.initialize`` in 0.5.13.post1: a draft with MTP layers uses
    ``num_nextn_predict_layers``; an explicit 0 means "absent", so the draft falls back to its
    hidden/attention layer count (it still allocates at least one layer, so it must be priced).
    """
    arch = model_config.hf_config.architectures[0]
    if arch in ONE_LAYER_DRAFT_ARCHS:
        return 1
    nextn = model_config.num_nextn_predict_layers
    if is_draft and nextn is not None and nextn > 0:
        layers = int(nextn)
    else:
        layers = max(model_config.num_hidden_layers, model_config.num_attention_layers)
    loop_num = getattr(model_config.hf_config, "loop_num", 1) or 1
    return layers * loop_num if loop_num > 1 else layers


def check_supported(hf_config: Any) -> None:
    """Raise BudgetError for a model whose KV pools the budget model cannot price.

    ``hf_config`` may be a ``PretrainedConfig`` or the raw ``config.json`` dict, so the offline
    planner can refuse before building a ``ModelConfig``.
    """
    from sglang.srt.configs.model_config import is_deepseek_v4

    if is_deepseek_v4(hf_config):
        raise BudgetError(
            "DeepSeek-V4 compressed KV pools (c4/c128/state) are not priced by sglang-specinit; "
            "disable the plugin for this model (SGLANG_SPECINIT_DISABLE=1)"
        )


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
    """The per-token KV spec of one ModelRunner's pool.

    ``num_layers`` is what the runner allocates (``num_effective_layers``);
    ``full_attention_layers`` overrides it for mamba/linear-attention hybrids, whose KV pool
    holds only the full-attention layers. With ``server_args``, an MLA pool takes SGLang's own
    per-layer width (:func:`mla_cache_dim_for`), which depends on the attention backends.
    """
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
    if model_config.is_hybrid_swa:
        full = AttentionKVSpec(
            num_layers=len(model_config.full_attention_layer_ids),
            kv_dtype=dtype,
            element_bytes=elt,
            num_kv_heads=model_config.get_num_kv_heads(attn_tp_size),
            head_dim=model_config.head_dim,
            v_head_dim=model_config.v_head_dim,
        )
        swa = AttentionKVSpec(
            num_layers=len(model_config.swa_attention_layer_ids),
            kv_dtype=dtype,
            element_bytes=elt,
            num_kv_heads=model_config.get_swa_num_kv_heads(attn_tp_size),
            head_dim=model_config.swa_head_dim,
            v_head_dim=model_config.swa_v_head_dim,
        )
        return HybridSWAKVSpec(full=full, swa=swa, swa_full_tokens_ratio=swa_full_tokens_ratio)
    layers = full_attention_layers if full_attention_layers is not None else num_layers
    if use_mla:
        return AttentionKVSpec(
            num_layers=layers,
            kv_dtype=dtype,
            element_bytes=elt,
            mla_cache_dim=(
                (mla_cache_dim_for(model_config, kv_dtype, server_args) or 0)
                if server_args is not None
                else 0
            ),
            kv_lora_rank=model_config.kv_lora_rank,
            qk_rope_head_dim=model_config.qk_rope_head_dim,
            dsa_index_head_dim=(
                get_dsa_index_head_dim(model_config.hf_config)
                if is_deepseek_dsa(model_config.hf_config)
                else 0
            ),
        )
    return AttentionKVSpec(
        num_layers=layers,
        kv_dtype=dtype,
        element_bytes=elt,
        num_kv_heads=model_config.get_num_kv_heads(attn_tp_size),
        head_dim=model_config.head_dim,
        v_head_dim=model_config.v_head_dim,
    )


def own_hf_config(model_config: Any) -> None:
    """Give ``model_config`` a private copy of its hf config (and the text config inside).

    SGLang's ``get_config`` is cached: every ``ModelConfig`` of one checkpoint holds the same
    ``PretrainedConfig`` object, and a draft ``ModelConfig`` rewrites it in place.
    """
    import copy
    import sys

    get_hf_text_config = sys.modules[type(model_config).__module__].get_hf_text_config
    model_config.hf_config = copy.deepcopy(model_config.hf_config)
    model_config.hf_text_config = get_hf_text_config(model_config.hf_config)


def is_linear_attention_hybrid(model_config: Any) -> bool:
    """Mamba / linear-attention hybrids (Qwen3-Next, Qwen3.5, Nemotron-H ...): their KV pool
    holds only full-attention layers; SGLang's ModelRunner finds them by these config classes."""
    text_config = model_config.hf_text_config
    return not model_config.is_hybrid_swa and hasattr(text_config, "full_attention_layer_ids")


def mla_cache_dim_for(model_config: Any, kv_dtype: Any, server_args: Any) -> int | None:
    """SGLang's per-layer MLA pool width for this model and KV dtype, when it is not the plain
    ``kv_lora_rank + qk_rope_head_dim`` (DSA with an FP8 cache stores scales and a bf16 rope).

    Calls SGLang's own ``calculate_mla_kv_cache_dim`` on the three attributes it reads.
    """
    from types import SimpleNamespace

    from sglang.srt.model_executor.model_runner_kv_cache_mixin import ModelRunnerKVCacheMixin

    reader = SimpleNamespace(
        model_config=model_config, kv_cache_dtype=torch_dtype(kv_dtype), server_args=server_args
    )
    dim = ModelRunnerKVCacheMixin.calculate_mla_kv_cache_dim(reader)
    plain = model_config.kv_lora_rank + model_config.qk_rope_head_dim
    return None if dim == plain else int(dim)


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
    """The KV pools a draft worker will allocate, each at the draft's own geometry and dtype.

    ``algorithm`` is SGLang's resolved name (aliases such as NEXTN already mapped to EAGLE).
    Frozen-KV MTP reads the target's cache and NGRAM has no model: no pools.
    """
    if algorithm in ("FROZEN_KV_MTP", "NGRAM") or draft_model_config is None:
        return ()
    layers = runner_layer_count(draft_model_config, is_draft=True)
    pool = kv_spec_from_model_config(
        draft_model_config,
        kv_dtype,
        attn_tp_size=attn_tp_size,
        num_layers=layers,
        swa_full_tokens_ratio=swa_full_tokens_ratio,
        full_attention_layers=(
            DRAFT_FULL_ATTENTION_LAYERS if is_linear_attention_hybrid(draft_model_config) else None
        ),
        server_args=server_args,
    )
    # Multi-layer EAGLE builds one ModelRunner per step, each owning a pool of its own.
    copies = num_steps if multi_layer_eagle else 1
    return (pool,) * copies


def upstream_reserved_layers(algorithm: str, draft_model_config: Any) -> int:
    """The ``d`` SGLang 0.5.14 reserves for this draft (0 means "nothing reserved").

    0.5.14 takes ``num_nextn_predict_layers`` whenever it is not None (so an explicit 0 reserves
    nothing) and otherwise the draft's hidden/attention layer count; frozen-KV MTP is included
    because ``is_eagle()`` covers it. DFLASH keeps its own ``dflash_draft_num_layers`` rule.
    """
    if draft_model_config is None or algorithm == "NGRAM":
        return 0
    if algorithm == "DFLASH":
        return int(getattr(draft_model_config.hf_config, "num_hidden_layers", 0) or 0)
    nextn = draft_model_config.num_nextn_predict_layers
    if nextn is not None:
        return int(nextn)
    return max(draft_model_config.num_hidden_layers, draft_model_config.num_attention_layers)


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
    """(bytes per request row, fixed bytes) a draft allocates besides token-sized KV pools.

    Multi-layer EAGLE keeps ``num_steps - 1`` hidden states of the target's width per
    req-to-token row; frozen-KV MTP's runner gets a 64-token stand-in pool. The runtime
    measures the same two things on the live workers (``phases.scheduler.describe_draft``).
    """
    from sglang_specinit.budget import kv_pool_bytes

    per_request = 0
    if multi_layer_eagle and algorithm != "FROZEN_KV_MTP":
        element = _torch_dtype_bytes(target_model_config.dtype)
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


# Token count of the stand-in pool FrozenKVMTPWorker (0.5.13.x) gives its own runner.
FROZEN_KV_STAND_IN_TOKENS = 64


def _torch_dtype_bytes(dtype: Any) -> int:
    return element_bytes(dtype)
