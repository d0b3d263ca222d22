"""Checkpoint bytes per TP rank: which tensors SGLang 0.5.13.post1 splits, and over which group.

A rank does not hold ``checkpoint / tp``: layer norms, the EAGLE ``fc`` and other replicated
tensors are whole on every rank, vocabulary tables are padded before they are split, and KV
projections are replicated once there are fewer KV heads than ranks. Each checkpoint tensor is
priced by the SGLang layer class that loads it (Llama-family names, which the EAGLE, EAGLE3,
Qwen, Mistral and DeepSeek drafts and targets share):

====================================  ================================  =======================
checkpoint tensor (name ends with)    SGLang layer (0.5.13.post1)       on each rank
====================================  ================================  =======================
``*norm.weight`` / ``*norm.bias``     ``RMSNorm`` / ``LayerNorm``       whole
``fc.weight`` / ``fc.bias`` (EAGLE)   ``torch.nn.Linear``               whole
``model.layers.N.eh_proj.*`` (MTP)    ``nn.Linear`` / replicated        whole
``d2t`` / ``t2d`` (EAGLE3 maps)       plain tensors                     whole
``o_proj.bias`` / ``down_proj.bias``  ``RowParallelLinear`` bias        whole
``mlp.gate.weight``                   MoE router, ``ReplicatedLinear``  whole
``q_a_proj`` / ``kv_a_proj_with_mqa`` MLA, ``ReplicatedLinear``         whole
``embed_tokens`` / ``lm_head`` /      ``VocabParallelEmbedding`` /      padded rows / group
``shared_head.head``                  ``ParallelLMHead``                (``pad_vocab_size``)
``self_attn.k_proj`` / ``v_proj``     ``QKVParallelLinear``, KV part    ``max(1, kv // t)`` heads
``self_attn.*`` (q, o, MLA b-proj.)   column / row parallel             1 / t
anything else (MLP, experts)          column / row parallel             1 / tp
====================================  ================================  =======================

``t`` is the size of the group the attention is built on: the attention-TP group
(``tp / dp``) under ``--enable-dp-attention`` for models whose SGLang module builds attention
on it, the full TP group otherwise. Under dp-attention an EAGLE3 draft is built entirely on the
attention-TP group (``EAGLEWorkerV2.__init__``: ``draft_tp_context(get_attention_tp_group())``),
and ``--enable-dp-lm-head`` puts the LM head there too.

Approximated: expert parallelism (experts are divided by TP, not EP), quantized checkpoints
whose scales follow other rules, and tensors that are not in the checkpoint at all (rotary
``cos_sin_cache`` buffers, a few KiB to MiB): a measured ``--resident-bytes`` covers those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from sglang_specinit.planner.weights import CheckpointSizes

_REPLICATED = re.compile(
    r"(norm\.(weight|bias)"
    r"|(^|\.)fc\.(weight|bias)"
    # DeepSeek / GLM NextN: ``nn.Linear`` (``ReplicatedLinear`` under quark), not TP-split
    # (``models/deepseek_nextn.py`` 0.5.13.post1 line 118, ``glm4_moe_nextn.py`` line 68).
    # Nemotron-H's ``mtp.layers.N.eh_proj`` is a ``ColumnParallelLinear``: not matched.
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
    """Group sizes one model's tensors are split over, on one rank.

    ``attention_tp_size``: the group its attention projections are built on; ``embed_tp_size`` /
    ``lm_head_tp_size``: the groups of its vocabulary tables.
    """

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
    """Rows of a vocabulary table on one rank: SGLang pads the vocabulary, then splits it."""
    from sglang.srt.layers.vocab_parallel_embedding import pad_vocab_size

    return pad_vocab_size(rows) // group_size if group_size > 1 else pad_vocab_size(rows)


def rank_vocab_table_bytes(hf_config: Any, dtype_bytes: int, group_size: int) -> int:
    """Bytes of a ``vocab_size x hidden_size`` table one rank allocates (one the checkpoint
    does not store but the model builds, e.g. an EAGLE draft's embedding before it is bound)."""
    rows = int(hf_config.vocab_size)
    return padded_rows_per_rank(rows, group_size) * int(hf_config.hidden_size) * dtype_bytes


def rank_tensor_bytes(
    name: str, nbytes: int, rows: int | None, hf_config: Any, layout: ShardLayout
) -> int:
    """Bytes of checkpoint tensor ``name`` (``nbytes`` whole, ``rows`` in its first dim) on one
    rank (see the module table)."""
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
    """``sizes`` as one rank holds them, and a note when that had to be approximated.

    With every tensor known (safetensors headers) each one is priced by
    :func:`rank_tensor_bytes`. Otherwise (an index file, ``.bin`` files, a summary) the listed
    tensors are priced the same way and the rest of the total is divided by TP.
    """
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
    """Names defined in the SGLang module that builds this architecture.

    The module is the one SGLang's own ``ModelRegistry`` resolves the architecture to; what it
    imports says which groups it builds on: ``get_attention_tp_size`` (attention on the
    attention-TP group: DeepSeek, Qwen3, Qwen-MoE, GLM-4-MoE, gpt-oss, ...) and
    ``get_embed_tp_kwargs`` (embedding on it). Llama's module imports neither.
    """
    import sys

    from sglang.srt.models.registry import ModelRegistry

    architectures = list(getattr(hf_config, "architectures", None) or [])
    model_cls, _ = ModelRegistry.resolve_model_cls(architectures)
    return frozenset(vars(sys.modules[model_cls.__module__]))


def model_layout(server_args: Any, hf_config: Any, attn_tp_size: int) -> ShardLayout:
    """One model's layout for these launch flags (target, or a draft on the full TP group)."""
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
