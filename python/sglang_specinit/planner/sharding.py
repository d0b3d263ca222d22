"""Checkpoint bytes per TP rank, priced by the SGLang layer class that loads each tensor."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from sglang_specinit.planner.weights import CheckpointSizes

_REPLICATED = re.compile(
    r"(norm\.(weight|bias)"
    r"|(^|\.)fc\.(weight|bias)"
    # DeepSeek / GLM NextN's eh_proj is not TP-split; Nemotron-H's ``mtp.layers.N.eh_proj``
    # (column parallel) is not matched.
    r"|^model\.layers\.\d+\.eh_proj\.\w+"
    r"|(^|\.)(d2t|t2d)"
    r"|(o_proj|down_proj)\.bias"
    r"|mlp\.gate\.weight"
    r"|e_score_correction_bias"
    r"|(q_a_proj|kv_a_proj_with_mqa)\.(weight|bias|weight_scale_inv)"
    r"|rotary_emb\.inv_freq)$"
)
_EMBEDDING = re.compile(r"(^|\.)embed_tokens\.weight$")
_LM_HEAD = re.compile(r"(^|\.)(lm_head|shared_head\.head)\.weight$")
_KV_PROJ = re.compile(r"self_attn\.(k_proj|v_proj)\.(weight|bias)$")
_ATTENTION = re.compile(r"self_attn\.")


@dataclass(frozen=True)
class ShardLayout:
    """Group sizes one model's tensors are split over: TP, attention projections, vocab tables."""

    tp_size: int
    attention_tp_size: int
    embed_tp_size: int
    lm_head_tp_size: int

    @classmethod
    def uniform(cls, tp_size: int) -> ShardLayout:
        return cls(tp_size, tp_size, tp_size, tp_size)


def _ceil_div(n: int, d: int) -> int:
    return -(-n // d)


def padded_rows_per_rank(rows: int, group_size: int) -> int:
    """Rows of a vocabulary table on one rank: padded, then split."""
    from sglang.srt.layers.vocab_parallel_embedding import pad_vocab_size

    return pad_vocab_size(rows) // group_size if group_size > 1 else pad_vocab_size(rows)


def rank_vocab_table_bytes(hf_config: Any, dtype_bytes: int, group_size: int) -> int:
    """Bytes of a ``vocab_size x hidden_size`` table one rank allocates."""
    rows = int(hf_config.vocab_size)
    return padded_rows_per_rank(rows, group_size) * int(hf_config.hidden_size) * dtype_bytes


def rank_tensor_bytes(
    name: str, nbytes: int, rows: int | None, hf_config: Any, layout: ShardLayout
) -> int:
    """Bytes of checkpoint tensor ``name`` (``nbytes`` whole, ``rows`` first dim) on one rank."""
    if _REPLICATED.search(name):
        return nbytes
    for pattern, group in ((_EMBEDDING, layout.embed_tp_size), (_LM_HEAD, layout.lm_head_tp_size)):
        if pattern.search(name):
            if not rows:
                return _ceil_div(nbytes, group)
            return nbytes // rows * padded_rows_per_rank(rows, group)
    t = layout.attention_tp_size
    if _KV_PROJ.search(name):
        kv_heads = int(getattr(hf_config, "num_key_value_heads", 0) or 0)
        if kv_heads <= 0:
            return _ceil_div(nbytes, t)
        return nbytes * max(1, kv_heads // t) // kv_heads
    if _ATTENTION.search(name):
        return _ceil_div(nbytes, t)
    return _ceil_div(nbytes, layout.tp_size)


def sizes_on_rank(
    sizes: CheckpointSizes, hf_config: Any, layout: ShardLayout
) -> tuple[CheckpointSizes, tuple[str, ...]]:
    """``sizes`` as one rank holds them; unlisted tensors are divided by TP, with a note."""
    if layout == ShardLayout.uniform(1):
        return sizes, ()
    per_rank = {
        name: rank_tensor_bytes(name, n, sizes.tensor_rows.get(name), hf_config, layout)
        for name, n in sizes.tensor_bytes.items()
    }
    if sizes.complete:
        total = sum(per_rank.values())
        notes: tuple[str, ...] = ()
    else:
        listed = sum(sizes.tensor_bytes.values())
        total = sum(per_rank.values()) + _ceil_div(sizes.total_bytes - listed, layout.tp_size)
        notes = (
            f"{sizes.source} does not list every tensor: the unlisted ones are counted as "
            f"checkpoint / {layout.tp_size} per rank",
        )
    groups = {p: _ceil_div(n, layout.tp_size) for p, n in sizes.group_bytes.items()}
    return replace(sizes, total_bytes=total, tensor_bytes=per_rank, group_bytes=groups), notes


def model_module_names(hf_config: Any) -> frozenset[str]:
    """Names in the SGLang module ``ModelRegistry`` resolves this architecture to: importing
    ``get_attention_tp_size`` / ``get_embed_tp_kwargs`` means built on the attention-TP group."""
    import sys

    from sglang.srt.models.registry import ModelRegistry

    architectures = list(getattr(hf_config, "architectures", None) or [])
    model_cls, _ = ModelRegistry.resolve_model_cls(architectures)
    return frozenset(vars(sys.modules[model_cls.__module__]))


def model_layout(server_args: Any, hf_config: Any, attn_tp_size: int) -> ShardLayout:
    """One model's layout for these launch flags."""
    tp = int(server_args.tp_size)
    if not server_args.enable_dp_attention or attn_tp_size == tp:
        return ShardLayout.uniform(tp)
    names = model_module_names(hf_config)
    attention = attn_tp_size if "get_attention_tp_size" in names else tp
    embed = attn_tp_size if "get_embed_tp_kwargs" in names else tp
    lm_head = attn_tp_size if server_args.enable_dp_lm_head else tp
    return ShardLayout(tp, attention, embed, lm_head)


def draft_layout(
    server_args: Any, algorithm: str, hf_config: Any, attn_tp_size: int
) -> ShardLayout:
    """The draft's layout: all on the attention-TP group for EAGLE3 under dp-attention."""
    if server_args.enable_dp_attention and algorithm == "EAGLE3":
        return ShardLayout.uniform(attn_tp_size)
    return model_layout(server_args, hf_config, attn_tp_size)
