"""Facts about a model and its runners every release reads the same way (no SGLang import at
module level)."""

from __future__ import annotations

from typing import Any

from sglang_specinit.budget import BudgetError

# Drafts ModelRunner.initialize gives one KV layer whatever their config says.
ONE_LAYER_DRAFT_ARCHS = frozenset({"MiMoV2MTP", "Step3p5MTP"})


# The stand-in pool FrozenKVMTPWorker gives its own runner.
FROZEN_KV_STAND_IN_TOKENS = 64


def kv_dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def torch_dtype(dtype: Any) -> Any:
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    resolved = getattr(torch, kv_dtype_name(dtype), None)
    if not isinstance(resolved, torch.dtype):
        raise BudgetError(f"{dtype!r} is not a torch dtype this torch build knows")
    return resolved


def element_bytes(dtype: Any) -> int:
    return int(torch_dtype(dtype).itemsize)


def runner_layer_count(model_config: Any, is_draft: bool) -> int:
    """KV layers a ModelRunner allocates (pp_size == 1): an explicit
    ``num_nextn_predict_layers: 0`` falls back to the layer count, so it is still priced."""
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
    """BudgetError for a model the budget model cannot price (``hf_config`` may be a dict)."""
    from sglang.srt.configs.model_config import is_deepseek_v4

    if is_deepseek_v4(hf_config) and not prices_deepseek_v4:
        from sglang_specinit.compat import generations

        where = f"sglang {release}" if release else "this sglang"
        v4 = [r for g in generations().values() for r in g.deepseek_v4_releases]
        raise BudgetError(
            f"DeepSeek-V4 compressed KV pools (c4/c128/state) are not priced on {where}: "
            f"plan it with sglang {v4[0]} - {v4[-1]} installed, or disable the plugin for this "
            "model (SGLANG_SPECINIT_DISABLE=1)"
        )


def own_hf_config(model_config: Any) -> None:
    """A private copy of the hf config: ``get_config`` is cached and a draft ``ModelConfig``
    rewrites the shared object in place."""
    import copy
    import sys

    get_hf_text_config = sys.modules[type(model_config).__module__].get_hf_text_config
    model_config.hf_config = copy.deepcopy(model_config.hf_config)
    model_config.hf_text_config = get_hf_text_config(model_config.hf_config)


def is_linear_attention_hybrid(model_config: Any) -> bool:
    """Mamba / linear-attention hybrids, whose KV pool holds only full-attention layers."""
    text_config = model_config.hf_text_config
    return not model_config.is_hybrid_swa and hasattr(text_config, "full_attention_layer_ids")


def upstream_reserved_layers(algorithm: str, draft_model_config: Any) -> int:
    """The ``d`` stock's phased releases reserve for this draft: an explicit
    ``num_nextn_predict_layers: 0`` reserves nothing."""
    if draft_model_config is None or algorithm == "NGRAM":
        return 0
    if algorithm == "DFLASH":
        return int(getattr(draft_model_config.hf_config, "num_hidden_layers", 0) or 0)
    nextn = draft_model_config.num_nextn_predict_layers
    if nextn is not None:
        return int(nextn)
    return max(draft_model_config.num_hidden_layers, draft_model_config.num_attention_layers)
