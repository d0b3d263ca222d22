"""Checkpoint weight sizes, read without loading a tensor (``weights-size.json``, safetensors
headers, the index's total, ``.bin`` file sizes), and which draft tensors SGLang replaces."""

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
# Draft architectures (as ``ModelConfig`` renames them) whose MTP loader the split follows.
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
    # tensor_bytes lists every tensor, so prefixes can be summed.
    complete: bool = False
    # First dimensions, where recorded: the vocabulary tables' rows decide their padding.
    tensor_rows: Mapping[str, int] = field(default_factory=dict)

    def tensor(self, name: str) -> int | None:
        return self.tensor_bytes.get(name)

    def under_prefix(self, prefix: str) -> int | None:
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
        if header_len > os.path.getsize(path) - 8:  # its header would run past its end
            raise WeightsError(f"{path}: not a safetensors file (a Git LFS pointer? git lfs pull)")
        header = json.loads(f.read(header_len))
    header.pop("__metadata__", None)
    return header


def read_checkpoint_sizes(model_dir: str) -> CheckpointSizes:
    summary = os.path.join(model_dir, WEIGHTS_SIZE_FILE)
    if os.path.isfile(summary):
        return _from_summary(summary)
    shards = sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
    if shards:
        sizes: dict[str, int] = {}
        rows: dict[str, int] = {}
        for shard in shards:
            for name, info in _read_header(shard).items():
                start, end = info["data_offsets"]
                sizes[name] = end - start
                if info["shape"]:
                    rows[name] = info["shape"][0]
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
    try:
        with open(path) as f:
            data = json.load(f)
        total, tensors, groups = (data.get(k, {}) for k in ("total_bytes", "tensors", "groups"))
        tensors, groups = ({k: int(v) for k, v in part.items()} for part in (tensors, groups))
    except (ValueError, AttributeError, TypeError) as e:  # not JSON, or not a summary's shape
        raise WeightsError(f"{path}: not a {WEIGHTS_SIZE_FILE} summary ({e})") from e
    if not isinstance(total, int) or total <= 0:
        raise WeightsError(f"{path}: total_bytes must be a positive integer")
    return CheckpointSizes(total, WEIGHTS_SIZE_FILE, tensor_bytes=tensors, group_bytes=groups)


@dataclass(frozen=True)
class WeightSplit:
    """Resident weight bytes of target and draft (whole checkpoints or one rank's share);
    ``draft_shared_bytes``: draft tensors allocated, then replaced with the target's."""

    target_bytes: int
    draft_bytes: int
    draft_shared_bytes: int
    notes: tuple[str, ...] = ()


def shared_tensor_names(algorithm: str, draft_hf_config: Any) -> tuple[str, ...]:
    """Names of the draft tensors SGLang replaces with the target's (``init_lm_head``)."""
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
    """A draft with its own checkpoint: a shared tensor counts as shared, stored or not (the
    draft model allocates it either way)."""
    draft_bytes = draft.total_bytes
    shared = 0
    for name in shared_names:
        # EAGLE checkpoints often store their tensors without the ``model.`` prefix.
        stored = draft.tensor(name)
        if stored is None:
            stored = draft.tensor(name.removeprefix("model."))
        if stored is not None:
            draft_bytes -= stored
            shared += stored
        else:
            shared += estimated_shared_bytes.get(name, 0)
    return WeightSplit(target.total_bytes, max(draft_bytes, 0), shared)


def mtp_layer_prefixes(target_hf_config: Any, num_mtp_layers: int) -> tuple[str, ...]:
    """Where a DeepSeek-V3 / GLM-4.5 style checkpoint stores its MTP layers: after the decoder's."""
    first = int(target_hf_config.num_hidden_layers)
    return tuple(f"model.layers.{first + i}." for i in range(num_mtp_layers))


def split_mtp_from_target(
    checkpoint: CheckpointSizes,
    prefixes: tuple[str, ...],
    draft_table_bytes: int,
    draft_architecture: str | None = None,
) -> WeightSplit:
    """The draft is the target checkpoint's own MTP layers, which the target skips; the draft
    loads them and allocates its own embedding and head (``draft_table_bytes``), later replaced."""
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
        # The NextN loaders skip the layer's embed_tokens and shared_head.head.
        for name, n in checkpoint.tensor_bytes.items():
            local = name.removeprefix(prefix)
            if name.startswith(prefix) and ("embed_tokens" in local or "shared_head.head" in local):
                skipped += n
    target_bytes = checkpoint.total_bytes - mtp_total
    return WeightSplit(target_bytes, mtp_total - skipped, draft_table_bytes, tuple(notes))
