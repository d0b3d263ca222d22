"""Every tiny checkpoint kind by name, for code that picks a kind by its cache name.

The family modules own their kinds (writer and generator version); this table only collects
them, so that ``cached_model("eagle3-draft", shape, ...)`` and a listing of all kinds have one
source. Cheap to import (the writers import torch and transformers when they run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.checkpoints import deepseek_mla, eagle_drafts, gemma4_mtp, llama_family, mimo_v2_mtp
from harness.checkpoints.checkpoint_cache import Kind, cached_checkpoint

KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        llama_family.LLAMA_TARGET,
        llama_family.STANDALONE_DRAFT,
        llama_family.QWEN2,
        eagle_drafts.EAGLE_DRAFT,
        eagle_drafts.EAGLE3_DRAFT,
        eagle_drafts.DFLASH_DRAFT,
        deepseek_mla.MLA_TARGET,
        mimo_v2_mtp.MIMO_V2_TARGET,
        gemma4_mtp.GEMMA4_TARGET,
        gemma4_mtp.GEMMA4_ASSISTANT,
    )
}


def cached_model(kind: str, shape: Any, **kw: Any) -> Path:
    """The cached checkpoint of the kind named ``kind`` (``seed``, ``cache_root`` and the
    writer's own keywords in ``kw``), generated if absent."""
    if kind not in KINDS:
        raise ValueError(f"unknown tiny model kind {kind!r}; expected one of {sorted(KINDS)}")
    return cached_checkpoint(KINDS[kind], shape, **kw)
