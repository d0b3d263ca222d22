"""Per-rank memory reports: one file per scheduler, and which rank is the tightest.

Every scheduler of a phased launch writes its memory breakdown to
``$SGLANG_SPECINIT_REPORT_DIR/memory-rank<index>-pp<p>-tp<t>-dp<d>.json``. ``index`` numbers the
launch's scheduler processes once (DP replicas x PP stages x TP ranks), so no two ranks write
the same file; the coordinates are spelled out so a reader needs no arithmetic.

The tightest rank is the one with the least free device memory when the pools were sized: its
value is SGLang's all-rank minimum (a MIN all-reduce SGLang does anyway), which the shared token
count was sized from. Each rank also reads its own free memory (a local reading, no collective)
and so knows on its own whether it set that minimum; its summary line says so. Naming *the*
tightest rank of a launch needs every rank's numbers, so that is done here, after the fact, from
the files (:func:`tightest`), rather than with a gather the launch does not otherwise need.

Both adapters build their rank fields, tightness fields and files here
(:func:`rank_fields`, :func:`tightness_fields`, :func:`write_breakdown`); each only reads its
release's objects (0.5.13.x: ``Scheduler.ps``; 0.5.23: ``runtime_context.get_parallel()``).

No torch and no SGLang import: the planner, tests and tools read these files too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sglang_specinit.report import human_bytes

FILE_PREFIX = "memory-rank"
# Ranks whose free memory at sizing is within this of the all-rank minimum count as tightest:
# the minimum travels as a float32 (SGLang's all-reduce), which rounds to 4 KiB at 80 GiB, and
# symmetric GPUs differ by their context and communicator buffers.
TIGHTEST_TOLERANCE_BYTES = 1 << 20


def scheduler_rank_index(
    replica: int, pp_rank: int, tp_rank: int, pp_size: int, tp_size: int
) -> int:
    """Index of one scheduler process in a launch of DP replicas x PP stages x TP ranks."""
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
    """Where one scheduler sits in the launch, under the breakdown's key names.

    ``replica`` is its DP replica (separate schedulers, ``--dp`` without attention DP; 0 under
    attention DP, whose DP ranks live inside the TP group and add no index of their own);
    ``dp_rank`` is the DP rank the file name shows (the replica, or the attention-DP rank).
    """
    return {
        "rank_index": scheduler_rank_index(replica, pp_rank, tp_rank, pp_size, tp_size),
        "tp_rank": tp_rank,
        "pp_rank": pp_rank,
        "dp_rank": dp_rank,
        "attn_tp_rank": attn_tp_rank,
        "pp_size": pp_size,
        "dp_size": dp_size,
    }


def tightness_fields(rank_free_bytes: int | None, min_free_bytes: int | None) -> dict[str, Any]:
    """This rank's free memory at sizing next to the all-rank minimum the budget was built on.

    Every rank already holds both numbers (its own local reading and SGLang's MIN all-reduce),
    so each decides alone whether it is the tightest; no collective is added. ``None`` for
    either (a reading the adapter cannot recover) leaves the rank's tightness unknown.
    """
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
    """Write one rank's breakdown to ``directory/<breakdown_file_name>`` (whole or not at all:
    a reader of a live launch never sees half a file)."""
    path = Path(directory) / breakdown_file_name(breakdown)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(breakdown, sort_keys=True))
    tmp.replace(path)
    return path


def rank_label(breakdown: Mapping[str, Any]) -> str:
    """``rank 1 (pp0 tp1 dp0)``; a breakdown without rank fields is rank 0."""
    return (
        f"rank {breakdown.get('rank_index', 0)} (pp{breakdown.get('pp_rank', 0)} "
        f"tp{breakdown.get('tp_rank', 0)} dp{breakdown.get('dp_rank', 0)})"
    )


def breakdown_file_name(breakdown: Mapping[str, Any]) -> str:
    """``memory-rank<index>-pp<p>-tp<t>-dp<d>.json`` for one rank's breakdown."""
    return (
        f"{FILE_PREFIX}{breakdown.get('rank_index', 0)}-pp{breakdown.get('pp_rank', 0)}"
        f"-tp{breakdown.get('tp_rank', 0)}-dp{breakdown.get('dp_rank', 0)}.json"
    )


def tightness(breakdown: Mapping[str, Any]) -> str:
    """One rank's summary line: is it the tightest, and what did it size."""
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


def read_rank_breakdowns(directory: str | Path) -> list[dict[str, Any]]:
    """Every rank's breakdown in ``directory``, ordered by rank index."""
    found = [json.loads(p.read_text()) for p in Path(directory).glob(f"{FILE_PREFIX}*.json")]
    return sorted(found, key=lambda b: b.get("rank_index", 0))


def tightest(breakdowns: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The breakdown of the rank with the least free memory at sizing (first on a tie).

    Raises ValueError when the breakdowns disagree on the token count: every rank must size
    the same pools from the same all-rank minimum.
    """
    if not breakdowns:
        raise ValueError("no rank breakdowns")
    tokens = {b["tokens"] for b in breakdowns}
    if len(tokens) != 1:
        raise ValueError(f"ranks sized different token counts: {sorted(tokens)}")
    known = [b for b in breakdowns if b.get("rank_free_at_sizing_bytes") is not None]
    if not known:
        return breakdowns[0]
    return min(known, key=lambda b: (b["rank_free_at_sizing_bytes"], b.get("rank_index", 0)))
