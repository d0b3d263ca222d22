"""Early binding on a launch that keeps stock sizing, only where stock's reserve (``d`` layers of
the target's KV geometry per token) covers what the draft then allocates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sglang_specinit.live_sizing import _storage_key_and_bytes, storage_bytes
from sglang_specinit.phased.early_binding import bind_shared_weights_early

MIB = 1 << 20

# ModelConfig readings that fix a layer's KV row; equal ones store equal rows.
_GEOMETRY_FIELDS = (
    "attention_arch",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "head_dim",
    "v_head_dim",
)
# DSA's index-K row, from the hf config (absent elsewhere).
_HF_GEOMETRY_FIELDS = ("index_head_dim", "index_n_heads")


@dataclass(frozen=True)
class EarlyBinding:
    bound: tuple[str, ...] = ()
    freed_bytes: int = 0
    skipped: str = ""

    def note(self) -> str:
        if self.skipped:
            return f"draft embed/lm_head not bound early ({self.skipped})"
        if not self.bound:
            return "draft embed/lm_head bound early: nothing was duplicated"
        return (
            f"bound {', '.join(self.bound)} to the target's before profiling: "
            f"{self.freed_bytes / MIB:,.1f} MiB freed for stock's KV pool"
        )


def kv_geometry(runner: Any) -> tuple[Any, ...]:
    config = runner.model_config
    hf = getattr(config, "hf_config", None)
    dtype = str(getattr(runner, "kv_cache_dtype", None))
    return (
        *(getattr(config, name, None) for name in _GEOMETRY_FIELDS),
        *(getattr(hf, name, None) for name in _HF_GEOMETRY_FIELDS),
        config.get_total_num_kv_heads(),
        _SAME_ROW_BYTES.get(dtype, dtype),
    )


# An fp16 draft beside a bf16 target stores the same row bytes with the same pool class.
_SAME_ROW_BYTES = {"torch.float16": "16-bit float", "torch.bfloat16": "16-bit float"}


def stock_reserve_gap(
    target_runner: Any,
    draft_runners: Sequence[Any],
    reserved_layers: int,
    draft_layers: Sequence[int],
    draft_rows_per_row: int = 1,
    reserved_rows_per_row: int = 1,
) -> str:
    """Why stock's reserve may not cover this draft ("" when it does); the rows per target row
    are ``dcp`` for a DCP-replicated draft, else 1."""
    if not draft_runners:
        return "this rank holds no draft runner"
    total = sum(draft_layers)
    if total > reserved_layers:
        return (
            f"stock reserves {reserved_layers} draft layer(s) and the draft allocates {total}: "
            "more tokens would cost more than stock's price"
        )
    if draft_rows_per_row > reserved_rows_per_row:
        return (
            f"the draft pool is replicated over {draft_rows_per_row} decode-context-parallel "
            f"ranks' rows and stock reserves {reserved_rows_per_row} per target row: more "
            "tokens would cost more than stock's price"
        )
    target = kv_geometry(target_runner)
    if any(kv_geometry(r) != target for r in draft_runners):
        return (
            "the draft stores KV in a geometry of its own and stock reserves it at the "
            "target's: more tokens would cost more than stock's price"
        )
    return ""


def bind_under_stock_sizing(
    scheduler: Any,
    weight_runners: Sequence[Any],
    gap: str,
) -> EarlyBinding:
    if gap:
        return EarlyBinding(skipped=gap)
    target_model = scheduler.tp_worker.model_runner.model
    before = _own_parameters(target_model, weight_runners)
    if not bind_shared_weights_early(scheduler.draft_worker):
        return EarlyBinding(skipped="the draft worker binds nothing")
    after = _own_parameters(target_model, weight_runners)
    bound = tuple(name for name in before if name not in after)
    # Distinct storages apart from the target's, before and after (tied tensors count once).
    freed = sum(size for _, size in set(before.values())) - sum(
        size for _, size in set(after.values())
    )
    return EarlyBinding(bound=bound, freed_bytes=max(freed, 0))


def _own_parameters(target_model: Any, runners: Sequence[Any]) -> dict[str, tuple[Any, int]]:
    target = storage_bytes([target_model])
    own: dict[str, tuple[Any, int]] = {}
    for runner in runners:
        for name, tensor in runner.model.named_parameters(remove_duplicate=False):
            key, size = _storage_key_and_bytes(tensor)  # the identity storage_bytes uses
            if key not in target:
                own[name] = (key, size)
    return own
