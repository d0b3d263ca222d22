"""Facts about a model and its runners that every release reads the same way (no SGLang import
at module level): dtype names and element sizes from torch, the KV layers a runner allocates,
a private copy of a cached hf config, which configs are linear-attention hybrids, and which
models the planner refuses.
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.budget import BudgetError

# Drafts whose runner allocates exactly one KV layer whatever their config says
# (ModelRunner.initialize special-cases these architectures in 0.5.13.post1).
ONE_LAYER_DRAFT_ARCHS = frozenset({"MiMoV2MTP", "Step3p5MTP"})


# Token count of the stand-in pool FrozenKVMTPWorker (0.5.13.x) gives its own runner.
FROZEN_KV_STAND_IN_TOKENS = 64


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


def check_supported(
    hf_config: Any, *, prices_deepseek_v4: bool = False, release: str | None = None
) -> None:
    """Raise BudgetError for a model whose KV pools the budget model cannot price.

    ``hf_config`` may be a ``PretrainedConfig`` or the raw ``config.json`` dict, so the offline
    planner can refuse before building a ``ModelConfig``. DeepSeek-V4's compressed pools are
    priced only by a replay that runs the release's own V4 solve (``prices_deepseek_v4``: the
    0.5.23 generation's, ``sglang_0_5_23.dsv4_sizing``); ``release`` names the one asked.
    """
    from sglang.srt.configs.model_config import is_deepseek_v4

    if is_deepseek_v4(hf_config) and not prices_deepseek_v4:
        where = f"sglang {release}" if release else "this sglang"
        raise BudgetError(
            f"DeepSeek-V4 compressed KV pools (c4/c128/state) are not priced on {where}: "
            "plan it with sglang 0.5.20 - 0.5.23 installed, or disable the plugin for this "
            "model (SGLANG_SPECINIT_DISABLE=1)"
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
