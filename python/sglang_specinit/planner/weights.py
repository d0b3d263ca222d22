"""Checkpoint weight sizes, read without loading a tensor.

Sources, in the order they are tried for a model directory:

1. ``weights-size.json`` (shipped examples, or a summary you write yourself)::

       {"total_bytes": 16060522496,
        "tensors": {"model.embed_tokens.weight": 1050673152, "lm_head.weight": 1050673152},
        "groups": {"model.layers.61.": 15911464960}}

   ``total_bytes`` is every tensor of the checkpoint; ``tensors`` lists the individual tensors the
   planner needs to know (the embedding and LM head a draft may share with its target);
   ``groups`` (optional) gives the total bytes of all tensors whose name starts with a prefix
   (an MTP layer stored inside the target's checkpoint).
2. ``*.safetensors`` headers: the 8-byte length plus JSON header of each file, which records every
   tensor's byte range. Exact, and it reads a few kilobytes per file.
3. ``model.safetensors.index.json``: ``metadata.total_size`` (shard files absent).
4. ``pytorch_model*.bin``: file sizes, an approximation (pickle framing included, no per-tensor
   sizes).

Which tensors a draft shares with its target mirrors SGLang 0.5.13.post1's
``EagleDraftWorker.init_lm_head`` (``speculative/eagle_worker_v2.py``): EAGLE and MTP drafts get
the target's embedding and LM head (``set_embed_and_head``); EAGLE3 drafts only the embedding
(``set_embed``) unless ``LlamaForCausalLMEagle3`` decides to load the head from the target (no
``draft_vocab_size``, ``models/llama_eagle3.py``); STANDALONE and DFLASH drafts share nothing.
"""

from __future__ import annotations

import glob
import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

WEIGHTS_SIZE_FILE = "weights-size.json"
EMBED = "model.embed_tokens.weight"
LM_HEAD = "lm_head.weight"
# Draft architectures (after ``ModelConfig._config_draft_model`` renames the target's) whose
# MTP-layer loader :func:`split_mtp_from_target` follows, read in 0.5.13.post1 and 0.5.23:
# DeepSeek-V3/V3.2/R1 and, in 0.5.13.post1, GLM-5 (``GlmMoeDsaForCausalLM`` -> the DeepSeek
# class); GLM-4.5/4.6/4.7; GLM-5 in 0.5.23 (a subclass of the DeepSeek class, same loader).
NEXTN_DRAFT_ARCHITECTURES = frozenset(
    {"DeepseekV3ForCausalLMNextN", "Glm4MoeForCausalLMNextN", "GlmMoeDsaForCausalLMNextN"}
)


class WeightsError(ValueError):
    """A checkpoint's size cannot be read; the message says what is missing."""


@dataclass(frozen=True)
class CheckpointSizes:
    """Byte sizes of one checkpoint (whole model, not per TP rank)."""

    total_bytes: int
    source: str
    tensor_bytes: Mapping[str, int] = field(default_factory=dict)
    group_bytes: Mapping[str, int] = field(default_factory=dict)
    # True when tensor_bytes lists every tensor (safetensors headers), so prefixes can be summed.
    complete: bool = False
    # First dimension of each tensor where the source records shapes (safetensors headers);
    # the vocabulary tables' row counts decide their padding per rank.
    tensor_rows: Mapping[str, int] = field(default_factory=dict)

    def tensor(self, name: str) -> int | None:
        return self.tensor_bytes.get(name)

    def under_prefix(self, prefix: str) -> int | None:
        """Bytes of all tensors whose name starts with ``prefix``; None when unknown."""
        if prefix in self.group_bytes:
            return self.group_bytes[prefix]
        if self.complete:
            return sum(n for name, n in self.tensor_bytes.items() if name.startswith(prefix))
        return None


def _read_header(path: str) -> dict[str, Any]:
    with open(path, "rb") as f:
        raw_len = f.read(8)
        if len(raw_len) != 8:
            raise WeightsError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        (header_len,) = struct.unpack("<Q", raw_len)
        header = json.loads(f.read(header_len))
    header.pop("__metadata__", None)
    return header


def read_safetensors_header(path: str) -> dict[str, int]:
    """Tensor name -> byte length, from one file's header (the data is never read)."""
    sizes: dict[str, int] = {}
    for name, info in _read_header(path).items():
        start, end = info["data_offsets"]
        sizes[name] = end - start
    return sizes


def read_safetensors_rows(path: str) -> dict[str, int]:
    """Tensor name -> first dimension, from one file's header (scalars are left out)."""
    return {name: info["shape"][0] for name, info in _read_header(path).items() if info["shape"]}


def read_checkpoint_sizes(model_dir: str) -> CheckpointSizes:
    """The sizes of the checkpoint in ``model_dir`` (see the module docstring for sources)."""
    summary = os.path.join(model_dir, WEIGHTS_SIZE_FILE)
    if os.path.isfile(summary):
        return _from_summary(summary)
    shards = sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
    if shards:
        sizes: dict[str, int] = {}
        rows: dict[str, int] = {}
        for shard in shards:
            sizes.update(read_safetensors_header(shard))
            rows.update(read_safetensors_rows(shard))
        return CheckpointSizes(
            total_bytes=sum(sizes.values()),
            source=f"safetensors headers ({len(shards)} files)",
            tensor_bytes=sizes,
            complete=True,
            tensor_rows=rows,
        )
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            total = json.load(f).get("metadata", {}).get("total_size")
        if not isinstance(total, int) or total <= 0:
            raise WeightsError(f"{index}: no metadata.total_size")
        return CheckpointSizes(total_bytes=total, source="model.safetensors.index.json")
    bins = sorted(glob.glob(os.path.join(model_dir, "pytorch_model*.bin")))
    if bins:
        return CheckpointSizes(
            total_bytes=sum(os.path.getsize(b) for b in bins),
            source="pytorch_model*.bin file sizes (approximate)",
        )
    raise WeightsError(
        f"no weights found in {model_dir}: expected {WEIGHTS_SIZE_FILE}, *.safetensors, "
        "model.safetensors.index.json or pytorch_model*.bin"
    )


def _from_summary(path: str) -> CheckpointSizes:
    with open(path) as f:
        data = json.load(f)
    total = data.get("total_bytes")
    if not isinstance(total, int) or total <= 0:
        raise WeightsError(f"{path}: total_bytes must be a positive integer")
    return CheckpointSizes(
        total_bytes=total,
        source=WEIGHTS_SIZE_FILE,
        tensor_bytes={k: int(v) for k, v in data.get("tensors", {}).items()},
        group_bytes={k: int(v) for k, v in data.get("groups", {}).items()},
    )


@dataclass(frozen=True)
class WeightSplit:
    """Resident weight bytes of target and draft (of whatever the sizes were: whole checkpoints,
    or one rank's share from :func:`sglang_specinit.planner.sharding.sizes_on_rank`).

    ``draft_shared_bytes`` are draft tensors the draft allocates and then replaces with the
    target's (embedding, LM head): resident while the pools are sized in 0.5.14, freed after.
    """

    target_bytes: int
    draft_bytes: int
    draft_shared_bytes: int
    notes: tuple[str, ...] = ()


def shared_tensor_names(algorithm: str, draft_hf_config: Any) -> tuple[str, ...]:
    """Names (HF layout) of the draft tensors SGLang replaces with the target's."""
    if algorithm in ("STANDALONE", "DFLASH", "NGRAM"):
        return ()
    tied = bool(getattr(draft_hf_config, "tie_word_embeddings", False))
    if algorithm == "EAGLE3":
        # LlamaForCausalLMEagle3: a tied head *is* the embedding; otherwise the head comes from
        # the target only when the draft has no vocabulary of its own.
        head_from_target = bool(getattr(draft_hf_config, "load_lm_head_from_target", False)) or (
            getattr(draft_hf_config, "draft_vocab_size", None) is None
        )
        return (EMBED,) if tied or not head_from_target else (EMBED, LM_HEAD)
    return (EMBED,) if tied else (EMBED, LM_HEAD)


def split_separate_draft(
    target: CheckpointSizes,
    draft: CheckpointSizes,
    shared_names: tuple[str, ...],
    estimated_shared_bytes: Mapping[str, int],
) -> WeightSplit:
    """A draft with its own checkpoint directory.

    A shared tensor stored in the draft checkpoint is loaded, then freed when bound, so it moves
    from ``draft_bytes`` to ``draft_shared_bytes``; one the checkpoint lacks is still allocated by
    the draft model, so its estimated size counts as shared.
    """
    draft_bytes = draft.total_bytes
    shared = 0
    for name in shared_names:
        stored = draft.tensor(name)
        if stored is not None:
            draft_bytes -= stored
            shared += stored
        else:
            shared += estimated_shared_bytes.get(name, 0)
    return WeightSplit(target.total_bytes, max(draft_bytes, 0), shared)


def mtp_layer_prefixes(target_hf_config: Any, num_mtp_layers: int) -> tuple[str, ...]:
    """Where a target checkpoint stores its MTP layers (DeepSeek-V3 / GLM-4.5 naming).

    DeepSeek-V3-style checkpoints append the MTP layers after the decoder layers
    (``model.layers.{num_hidden_layers + i}.``); the target model skips them when loading and
    the NextN draft loads only them.
    """
    first = int(target_hf_config.num_hidden_layers)
    return tuple(f"model.layers.{first + i}." for i in range(num_mtp_layers))


def nextn_skips(local_name: str) -> bool:
    """Whether a NextN loader skips this tensor of its MTP layer (name after the prefix).

    ``DeepseekV2WeightLoaderMixin.do_load_weights`` (``models/deepseek_common/
    deepseek_weight_loader.py``: 0.5.13.post1 line 187, 0.5.23 line 328) and
    ``Glm4MoeForCausalLM.load_weights`` (``models/glm4_moe.py``: 0.5.13.post1 line 1360, 0.5.23
    line 1163) drop every name containing ``embed_tokens`` or ``shared_head.head``: stored
    copies are never loaded, into the draft or the target.
    """
    return "embed_tokens" in local_name or "shared_head.head" in local_name


def split_mtp_from_target(
    checkpoint: CheckpointSizes,
    prefixes: tuple[str, ...],
    draft_table_bytes: int,
    draft_architecture: str | None = None,
) -> WeightSplit:
    """The draft is the target checkpoint's own MTP layers (draft path == model path).

    What SGLang does (0.5.13.post1 and 0.5.23, same code in both):

    * the target skips every layer from ``num_hidden_layers`` on (the same loaders'
      non-NextN branch: ``deepseek_weight_loader.py`` 0.5.13.post1 line 203, 0.5.23 line 344;
      ``glm4_moe.py`` lines 1351 / 1154), so the MTP layers leave the target;
    * the NextN draft keeps only names under its layer and skips the embedding and head
      copies (:func:`nextn_skips`), whether the checkpoint stores them (DeepSeek-V3/R1,
      GLM-4.5) or not (GLM-4.6, GLM-5): those bytes are resident nowhere;
    * the draft model builds its own ``VocabParallelEmbedding`` and ``ParallelLMHead``
      regardless (``DeepseekModelNextN.__init__`` / ``DeepseekV3ForCausalLMNextN.__init__``,
      ``models/deepseek_nextn.py``: 0.5.13.post1 lines 99 and 313, 0.5.23 lines 83 and 294;
      ``Glm4MoeModelNextN`` / ``Glm4MoeForCausalLMNextN``, ``models/glm4_moe_nextn.py``: lines
      58 and 139 / 60 and 139), left uninitialised, and ``EagleDraftWorker.init_lm_head``
      (``speculative/eagle_worker_v2.py``: 0.5.13.post1 line 305, 0.5.23 line 378) replaces both
      with the target's through ``set_embed_and_head``, which deletes them
      (``models/deepseek_v2.py`` 0.5.13.post1 line 2724, 0.5.23 line 3442; ``glm4_moe.py``
      lines 1450 / 1253).

    So ``draft_bytes`` is every tensor under the layer but the skipped copies, and
    ``draft_shared_bytes`` is ``draft_table_bytes``: what the draft model allocates for its own
    embedding and head (the caller prices them by the draft's dtype and vocabulary groups),
    never a stored copy's size. ``draft_architecture`` outside
    :data:`NEXTN_DRAFT_ARCHITECTURES` gets a note: its loader was not read.
    """
    mtp_total = 0
    skipped = 0
    notes: list[str] = []
    if draft_architecture is not None and draft_architecture not in NEXTN_DRAFT_ARCHITECTURES:
        notes.append(
            f"{draft_architecture}: the MTP weight split follows the DeepSeek / GLM NextN "
            "loaders (embed_tokens and shared_head.head under the layer skipped); this "
            "architecture's loader may differ"
        )
    for prefix in prefixes:
        layer = checkpoint.under_prefix(prefix)
        if layer is None:
            notes.append(
                f"{checkpoint.source} does not break down {prefix}*; the MTP layer is counted "
                "in the target's weights"
            )
            continue
        if layer == 0:
            notes.append(f"{checkpoint.source} holds no tensor under {prefix}*")
        mtp_total += layer
        skipped += sum(
            n
            for name, n in checkpoint.tensor_bytes.items()
            if name.startswith(prefix) and nextn_skips(name[len(prefix) :])
        )
    # Whatever could not be broken down stays inside the target's total, copies included.
    target_bytes = checkpoint.total_bytes - mtp_total
    return WeightSplit(target_bytes, mtp_total - skipped, draft_table_bytes, tuple(notes))
