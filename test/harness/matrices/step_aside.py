"""Target and draft pools of a stock-sized 0.5.23 launch, built the way its runners build them,
and the published layouts' per-rank weights the layout matrices share."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.checkpoints.published_configs import EXAMPLES


@dataclass(frozen=True)
class Weights:
    """Per-rank bytes: the target's, the draft's own (after binding), the draft tensors that
    duplicate the target's until 0.5.23 binds them (resident while stock profiles)."""

    target: int
    draft: int
    duplicates: int


def weights_size(example: str, role: str) -> dict[str, Any]:
    return json.loads((EXAMPLES / example / role / "weights-size.json").read_text())


def deepseek_mtp_weights(tp: int) -> Weights:
    size = weights_size("deepseek-v3-mtp", "target")
    mtp = size["groups"]["model.layers.61."]
    dup = (
        size["tensors"]["model.layers.61.embed_tokens.weight"]
        + size["tensors"]["model.layers.61.shared_head.head.weight"]
    )
    return Weights((size["total_bytes"] - mtp) // tp, (mtp - dup) // tp, dup // tp)


def example_dir(example: str, role: str) -> Callable[[Path], str]:
    return lambda tmp: str(EXAMPLES / example / role)


def made_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolved(args: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """``args`` with each callable of a scratch dir replaced by its value for ``tmp``."""
    tmp.mkdir(parents=True, exist_ok=True)
    return {k: (v(tmp) if callable(v) else v) for k, v in args.items()}


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def built_bytes(target: Any, drafts: Sequence[Any], config: Any) -> tuple[int, int]:
    """(target KV bytes, every draft's KV bytes) when the launch builds its pools from
    ``config``: storages each KV pool owns, not the shared request pool or allocator."""
    from sglang_specinit.pool_measure import kv_pool_storages, pool_logs_quiet
    from sglang_specinit.sglang_0_5_23.pool_probe import tiny_mamba_cache

    with pool_logs_quiet(), tiny_mamba_cache(target):
        pools = target._init_pools(
            sizes=target._derive_pool_sizes(config=config),
            req_to_token_pool=None,
            token_to_kv_pool_allocator=None,
        )
        req, alloc = pools.req_to_token_pool, pools.token_to_kv_pool_allocator
        target_bytes = sum(kv_pool_storages(pools.token_to_kv_pool, req, alloc).values())
        draft_bytes = 0
        for draft in drafts:
            built = draft._init_pools(
                sizes=draft._derive_pool_sizes(config=config),
                req_to_token_pool=req,
                token_to_kv_pool_allocator=alloc,
            )
            draft_bytes += sum(kv_pool_storages(built.token_to_kv_pool, req, alloc).values())
    return target_bytes, draft_bytes


def at_pp_stage(kvc: Any, rank: int, size: int) -> None:
    """Give ``kvc`` the layer range of PP stage ``rank``: SGLang reads it off the loaded
    model's ``start_layer`` / ``end_layer`` (``layer_setup._resolve_pp_layer_range``), which
    ``get_pp_indices`` sets; without weights a namespace holding that range stands in for
    the model (a test double: nothing else of it is read)."""
    from sglang.srt.distributed.utils import get_pp_indices
    from sglang.srt.model_executor.model_runner_components import layer_setup

    start, end = get_pp_indices(kvc.model_config.num_hidden_layers, rank, size)
    kvc.layer_info = layer_setup.resolve_layer_indices(
        model=SimpleNamespace(start_layer=start, end_layer=end),
        model_config=kvc.model_config,
        is_draft_worker=False,
    )
