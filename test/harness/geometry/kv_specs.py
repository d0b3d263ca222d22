"""Geometric KV specs: a pool's per-token bytes from the model's widths, layer counts and dtype."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sglang_specinit.budget import BudgetError, KVSpec

# Element sizes come from torch; FP4 dtypes hold two values per element (halved in the cell).
FP4_DTYPES = frozenset({"fp4_e2m1", "float4_e2m1fn_x2"})
FP4_SCALE_BLOCK = 16
# DSA (DeepSeek-V3.2) indexer keys: uint8 values plus one fp32 scale per 128-value block.
DSA_INDEX_QUANT_BLOCK = 128
DSA_INDEX_ELEMENT_BYTES = 1


@dataclass(frozen=True)
class AttentionKVSpec:
    """Per-token KV layout of one pool of full-attention layers on one attention-TP rank."""

    num_layers: int
    kv_dtype: str = "bfloat16"
    element_bytes: int = 0
    mla_cache_dim: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0
    v_head_dim: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    dsa_index_head_dim: int = 0

    def dtype_bytes(self) -> int:
        if self.element_bytes <= 0:
            raise BudgetError(
                f"no element size for KV-cache dtype {self.kv_dtype!r}: build the spec with "
                "sglang_specinit.model_facts (it reads the size from torch)"
            )
        return self.element_bytes

    def bytes_per_token(self) -> int:
        """Bytes one token occupies across all layers of this pool."""
        elt = self.dtype_bytes()
        fp4 = self.kv_dtype in FP4_DTYPES
        layers = self.num_layers
        if self.kv_lora_rank > 0:  # MLA
            latent = self.kv_lora_rank + self.qk_rope_head_dim
            # mla_cache_dim: a layout of its own (already in stored elements, scales included).
            cell = (self.mla_cache_dim or latent) * layers * elt
            if fp4 and not self.mla_cache_dim:
                cell = cell // 2 + (latent // FP4_SCALE_BLOCK) * layers * elt
            idx = self.dsa_index_head_dim  # 0 without a DSA indexer
            index = (idx + idx // DSA_INDEX_QUANT_BLOCK * 4) * layers * DSA_INDEX_ELEMENT_BYTES
            return cell + index
        cell = self.num_kv_heads * (self.head_dim + self.v_head_dim) * layers * elt
        if fp4:
            scales = self.num_kv_heads * self.head_dim * layers * 2 * elt // FP4_SCALE_BLOCK
            cell = cell // 2 + scales
        return cell

    def padding_bytes(self, page_size: int) -> int:
        """The pool allocates ``tokens + page_size`` slots: one padding page for dummy writes."""
        return page_size * self.bytes_per_token()

    def pool_bytes(self, tokens: int, page_size: int) -> int:
        """Bytes a pool of ``tokens`` allocates, padding page included."""
        return (tokens + page_size) * self.bytes_per_token()

    def unpacked_bytes_per_token(self) -> int:
        """Bytes per token at one element per value (MHA layout, no FP4 packing or scales)."""
        per_layer = self.num_kv_heads * (self.head_dim + self.v_head_dim)
        return per_layer * self.num_layers * self.dtype_bytes()


@dataclass(frozen=True)
class HybridSWAKVSpec:
    """A pool split into full-attention and sliding-window layers (gpt-oss, Gemma, Llama4 ...)."""

    full: AttentionKVSpec
    swa: AttentionKVSpec
    swa_full_tokens_ratio: float
    swa_follows_ratio: bool | None = None

    @property
    def ratio_applies(self) -> bool:
        if self.swa_follows_ratio is not None:
            return self.swa_follows_ratio
        return self.full.num_layers > 0

    def bytes_per_token(self) -> float:
        full, swa = self.full.unpacked_bytes_per_token(), self.swa.unpacked_bytes_per_token()
        if not self.ratio_applies:
            return full + swa
        return full + self.swa_full_tokens_ratio * swa

    def padding_bytes(self, page_size: int) -> int:
        return page_size * (
            self.full.unpacked_bytes_per_token() + self.swa.unpacked_bytes_per_token()
        )

    def pool_bytes(self, tokens: int, page_size: int) -> int:
        swa_tokens = tokens
        if self.ratio_applies:
            swa_tokens = int(tokens * self.swa_full_tokens_ratio) // page_size * page_size
        return (tokens + page_size) * self.full.unpacked_bytes_per_token() + (
            swa_tokens + page_size
        ) * self.swa.unpacked_bytes_per_token()


def sized_by_target(draft: KVSpec, target: KVSpec) -> KVSpec:
    """A draft pool as the target's ``MemoryPoolConfig`` sizes it."""
    if (
        isinstance(draft, HybridSWAKVSpec)
        and isinstance(target, HybridSWAKVSpec)
        and draft.ratio_applies != target.ratio_applies
    ):
        return replace(
            draft,
            swa_follows_ratio=target.ratio_applies,
            swa_full_tokens_ratio=target.swa_full_tokens_ratio,
        )
    return draft
