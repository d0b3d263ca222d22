"""Per-rank memory reports (``memory-rank<i>-pp<p>-tp<t>-dp<d>.json``) and which rank is the
tightest, against SGLang's all-rank minimum free memory (no SGLang import)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sglang_specinit.report import human_bytes, render_breakdown

FILE_PREFIX = "memory-rank"
# The prefix of the one-line JSON breakdown in a server's log (tests and tools grep for it).
MEMORY_LOG_PREFIX = "SPECINIT_MEMORY "
# The all-reduced minimum is a float32 (4 KiB steps at 80 GiB); symmetric GPUs differ a little.
TIGHTEST_TOLERANCE_BYTES = 1 << 20


def scheduler_rank_index(
    replica: int, pp_rank: int, tp_rank: int, pp_size: int, tp_size: int
) -> int:
    return (replica * pp_size + pp_rank) * tp_size + tp_rank


def rank_fields(
    *,
    replica: int,
    pp_rank: int,
    tp_rank: int,
    dp_rank: int,
    attn_tp_rank: int,
    pp_size: int,
    tp_size: int,
    dp_size: int,
) -> dict[str, int]:
    """``replica``: the DP replica (0 under attention DP, whose ranks live inside the TP
    group); ``dp_rank``: the DP rank the file name shows."""
    return {
        "rank_index": scheduler_rank_index(replica, pp_rank, tp_rank, pp_size, tp_size),
        "tp_rank": tp_rank,
        "pp_rank": pp_rank,
        "dp_rank": dp_rank,
        "attn_tp_rank": attn_tp_rank,
        "pp_size": pp_size,
        "dp_size": dp_size,
    }


def parallel_state_rank_fields(ps: Any, enable_dp_attention: bool) -> dict[str, int]:
    """:func:`rank_fields` read off a scheduler's ``ParallelState``."""
    dp_rank = ps.dp_rank or 0
    return rank_fields(
        replica=0 if enable_dp_attention else dp_rank,
        pp_rank=ps.pp_rank,
        tp_rank=ps.tp_rank,
        dp_rank=dp_rank,
        attn_tp_rank=ps.attn_tp_rank,
        pp_size=ps.pp_size,
        tp_size=ps.tp_size,
        dp_size=ps.dp_size,
    )


def tightness_fields(rank_free_bytes: int | None, min_free_bytes: int | None) -> dict[str, Any]:
    """This rank's free memory at sizing next to the all-rank minimum; None: unknown."""
    if rank_free_bytes is None or min_free_bytes is None:
        return {"rank_free_at_sizing_bytes": None, "tightest_rank": None}
    above = int(rank_free_bytes) - int(min_free_bytes)
    return {
        "rank_free_at_sizing_bytes": int(rank_free_bytes),
        "min_free_at_sizing_bytes": int(min_free_bytes),
        "free_above_tightest_bytes": above,
        "tightest_rank": above <= TIGHTEST_TOLERANCE_BYTES,
    }


def write_breakdown(directory: str | Path, breakdown: Mapping[str, Any]) -> Path:
    """Written whole or not at all: a reader of a live launch never sees half a file."""
    path = Path(directory) / breakdown_file_name(breakdown)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(breakdown, sort_keys=True))
    tmp.replace(path)
    return path


def cuda_fields_after_pools(device: str) -> dict[str, int]:
    if device != "cuda":
        return {}
    import torch

    free, _total = torch.cuda.mem_get_info()
    return {
        "cuda_free_bytes_after_pools": int(free),
        "cuda_torch_allocated_bytes": int(torch.cuda.memory_allocated()),
    }


def log_breakdown(log: logging.Logger, breakdown: Mapping[str, Any], headline: str) -> None:
    log.info(
        "[specinit] %s (%s):\n%s", headline, rank_label(breakdown), render_breakdown(breakdown)
    )
    log.info("[specinit] %s", tightness(breakdown))
    log.info("%s%s", MEMORY_LOG_PREFIX, json.dumps(breakdown, sort_keys=True))
    report_dir = os.environ.get("SGLANG_SPECINIT_REPORT_DIR")
    if report_dir:
        write_breakdown(report_dir, breakdown)


def rank_label(breakdown: Mapping[str, Any]) -> str:
    """``rank 1 (pp0 tp1 dp0)``; a breakdown without rank fields is rank 0."""
    return (
        f"rank {breakdown.get('rank_index', 0)} (pp{breakdown.get('pp_rank', 0)} "
        f"tp{breakdown.get('tp_rank', 0)} dp{breakdown.get('dp_rank', 0)})"
    )


def breakdown_file_name(breakdown: Mapping[str, Any]) -> str:
    return (
        f"{FILE_PREFIX}{breakdown.get('rank_index', 0)}-pp{breakdown.get('pp_rank', 0)}"
        f"-tp{breakdown.get('tp_rank', 0)}-dp{breakdown.get('dp_rank', 0)}.json"
    )


def tightness(breakdown: Mapping[str, Any]) -> str:
    label = rank_label(breakdown)
    tokens = breakdown["tokens"]
    if breakdown.get("tightest_rank") is None:
        return f"{label}: sized {tokens} tokens (free memory at sizing not known per rank)"
    minimum = human_bytes(breakdown["min_free_at_sizing_bytes"])
    if breakdown.get("tp_size", 1) * breakdown.get("pp_size", 1) * breakdown.get("dp_size", 1) == 1:
        return f"{label} (the only rank): sized {tokens} tokens from {minimum} free at sizing"
    if breakdown["tightest_rank"]:
        return (
            f"{label} is the tightest rank: its free memory at sizing ({minimum}) is the "
            f"all-rank minimum that sized {tokens} tokens on every rank"
        )
    return (
        f"{label} is not the tightest rank: {human_bytes(breakdown['free_above_tightest_bytes'])} "
        f"more free than the all-rank minimum ({minimum}) that sized {tokens} tokens"
    )


def tightest(breakdowns: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The rank with the least free memory at sizing; ValueError if ranks sized differently."""
    if not breakdowns:
        raise ValueError("no rank breakdowns")
    tokens = {b["tokens"] for b in breakdowns}
    if len(tokens) != 1:
        raise ValueError(f"ranks sized different token counts: {sorted(tokens)}")
    known = [b for b in breakdowns if b.get("rank_free_at_sizing_bytes") is not None]
    if not known:
        return breakdowns[0]
    return min(known, key=lambda b: (b["rank_free_at_sizing_bytes"], b.get("rank_index", 0)))
