"""Seven broken plugins as recorded case data, and the working case they break."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness.gpu import gpu_cases, gpu_release
from harness.gpu.gpu_verdict import (
    CaseEvidence,
    GraphCapture,
    Launch,
    failing_checks,
    sglang_meta_info,
)
from harness.reports import device_probe

GIB, MIB = 1 << 30, 1 << 20
CELL_TARGET, CELL_DRAFT = 128 << 10, 4 << 10  # Llama-3.1-8B's KV per token, an EAGLE3 draft's
DUPLICATES = GIB  # the draft's embed/lm_head copy (Llama-3.1-8B's embed)
NUM_DRAFT_TOKENS = 4
BATCH_LIST = (1, 2, 4, 8, 16, 24, 32)
# ``launch_of(batch_list, tokens)``: a launch's capture lines and /server_info, built by the
# release's own code.
LaunchOf = Callable[[Sequence[int], int], tuple[GraphCapture, dict[str, Any]]]


def recorded_probe(
    *,
    stray_bytes: int = 0,
    stray_freed_before_pools: bool = False,
    page_size: int = 1,
    pre: int = 80 * GIB,
    f: float = 0.9,
    draft_priced: bool = True,
    token_share: float = 1.0,
) -> list[dict[str, Any]]:
    """One scheduler's probe records of a phased EAGLE3 launch (Llama-3.1-8B-like target,
    0.8 GiB draft), with ``stray_bytes`` (a duplicate embed/lm_head) live at sizing."""
    target_w, draft_w, residue = 15 * GIB, int(0.8 * GIB), int(0.6 * GIB)
    price = CELL_TARGET + (CELL_DRAFT if draft_priced else 0)
    held = target_w + draft_w + stray_bytes
    free_at_sizing = pre - held - residue
    budget = int(f * pre)
    kv_budget = budget - (pre - free_at_sizing) - page_size * price  # + the padding page
    tokens = int(kv_budget // price * token_share) // page_size * page_size
    kv_t, kv_d = (tokens + page_size) * CELL_TARGET, (tokens + page_size) * CELL_DRAFT
    tables = 300 * MIB
    free, allocated = free_at_sizing, held
    if stray_freed_before_pools:
        free, allocated = free + stray_bytes, allocated - stray_bytes
    who = {"tp_rank": 0, "draft_model_idx": None}

    def reading(free_bytes: int, allocated_bytes: int) -> dict[str, int]:
        return {
            "free_bytes": free_bytes,
            "torch_allocated_bytes": allocated_bytes,
            "torch_reserved_bytes": allocated_bytes,
        }

    pool = {"method": device_probe.POOL_METHOD, "page_size": page_size, "kv_tokens": tokens}
    return [
        {"event": "pre_load", "is_draft": False, **who, "free_bytes": pre, "seq": 0},
        {"event": "enter", "is_draft": False, **who, **pool, "seq": 1, "weight_bytes": target_w}
        | reading(free_at_sizing, held),
        {"event": "exit", "is_draft": False, **who, **pool, "seq": 2, "kv_bytes": kv_t}
        | {"table_bytes": tables, "mem_fraction_static": f}
        | reading(free - kv_t - tables, allocated + kv_t + tables),
        {"event": "enter", "is_draft": True, **who, **pool, "seq": 3, "weight_bytes": draft_w}
        | reading(free - kv_t - tables, allocated + kv_t + tables),
        {"event": "exit", "is_draft": True, **who, **pool, "seq": 4, "kv_bytes": kv_d}
        | {"table_bytes": 0, "mem_fraction_static": f}
        | reading(free - kv_t - tables - kv_d, allocated + kv_t + tables + kv_d),
    ]


def plugin_breakdown(
    usage: device_probe.UsageAfterPools, records: list[dict[str, Any]], *, draft_priced: bool = True
) -> dict[str, Any]:
    exits = [r for r in records if r["event"] == "exit"]
    return {
        "tp_rank": 0,
        "tokens": exits[0]["kv_tokens"],
        "draft_request_bytes": 0,
        "draft_fixed_pool_bytes": 0,
        "page_size": exits[0]["page_size"],
        "pre_load_free_bytes": usage.pre_load_free_bytes,
        "budget_bytes": usage.budget_bytes,
        "target_kv_pool_bytes": exits[0]["kv_bytes"],
        "allocated_target_kv_pool_bytes": exits[0]["kv_bytes"],
        "target_kv_bytes_per_token": CELL_TARGET,
        "draft_kv_pool_bytes": exits[1]["kv_bytes"] if draft_priced else 0,
        "allocated_draft_kv_pool_bytes": exits[1]["kv_bytes"],
        "draft_kv_bytes_per_token": CELL_DRAFT if draft_priced else 0,
        "cuda_free_bytes_after_pools": exits[1]["free_bytes"],
        "cuda_free_bytes_after_init": exits[1]["free_bytes"] - GIB,
    }


def response(ids: list[int], verify_ct: int, correct: int) -> dict[str, Any]:
    """One greedy ``/generate`` answer, ``meta_info`` by the release's TokenizerManager."""
    meta = sglang_meta_info(len(ids), verify_ct, correct, NUM_DRAFT_TOKENS)
    return {"text": " ".join(map(str, ids)), "output_ids": ids, "meta_info": meta}


def responses(
    correct: int = 56, *, verify_ct: int = 40, changed_at: int | None = None
) -> list[dict]:
    """One server's answers (96 tokens each); ``changed_at``: the second one differs there."""
    out = []
    for i, _ in enumerate(gpu_cases.PROMPTS):
        ids = [1000 + 7 * i + t for t in range(96)]
        if changed_at is not None and i == 1:
            ids[changed_at] += 1
        out.append(response(ids, verify_ct, correct))
    return out


SHARED = {"draft0/lm_head.weight": "lm_head.weight", "draft0/embed_tokens.weight": "embed"}


def identity(*, bound_at_pool: bool = True) -> list[dict[str, list[dict[str, Any]]]]:
    after = {"point": "after_init", "tp_rank": 0, "drafts": 1, "shared": SHARED, "own": []}
    pool = dict(after, point="pool")
    if not bound_at_pool:
        pool.update(shared={}, own=sorted(SHARED))
    return [{"pool": [pool], "after_init": [after]}]


def _launch(
    launch_of: LaunchOf,
    records: list[dict[str, Any]],
    *,
    plugin: bool,
    bs: Sequence[int] = BATCH_LIST,
    draft_priced: bool = True,
    **answers: Any,
) -> Launch:
    usage = device_probe.usage_after_pools(records)
    capture, info = launch_of(bs, records[2]["kv_tokens"])
    breakdowns = [plugin_breakdown(usage, records, draft_priced=draft_priced)] if plugin else []
    return Launch(info, responses(**answers), capture, [usage], breakdowns)


def stock_launch(launch_of: LaunchOf, release: gpu_release.ReleaseSettings) -> Launch:
    """Stock on the same launch, duplicates resident (0.5.13.x: its draft's KV unpriced)."""
    priced = not release.stock_sizes_before_the_draft
    records = recorded_probe(stray_bytes=DUPLICATES, draft_priced=priced)
    launch = _launch(launch_of, records, plugin=False)
    launch.control = responses()
    return launch


def working_case(launch_of: LaunchOf, release: gpu_release.ReleaseSettings) -> CaseEvidence:
    return CaseEvidence(
        prompts=gpu_cases.PROMPTS,
        tp=1,
        expect_draft="draft",
        plugin=_launch(launch_of, recorded_probe(), plugin=True),
        stock=stock_launch(launch_of, release),
        identity=identity(),
        stock_after_init=identity()[0]["after_init"][0],
    )


def _plugin(e: CaseEvidence, launch: Launch, **changes: Any) -> CaseEvidence:
    return dataclasses.replace(e, plugin=launch, **changes)


BROKEN: dict[str, Callable[[CaseEvidence, LaunchOf], CaseEvidence]] = {
    # The duplicate embed/lm_head resident while the target pool is sized (stock's binding).
    "duplicates not bound before sizing": lambda e, lo: _plugin(
        e,
        _launch(
            lo, recorded_probe(stray_bytes=DUPLICATES, stray_freed_before_pools=True), plugin=True
        ),
        identity=identity(bound_at_pool=False),
    ),
    "draft KV priced at 0": lambda e, lo: _plugin(
        e, _launch(lo, recorded_probe(draft_priced=False), plugin=True, draft_priced=False)
    ),
    "20 % fewer tokens than possible": lambda e, lo: _plugin(
        e, _launch(lo, recorded_probe(token_share=0.8), plugin=True)
    ),
    # The draft proposes from the wrong vocabulary: the same greedy tokens, far more verify steps.
    "hot-token map corrupted": lambda e, lo: _plugin(
        e, _launch(lo, recorded_probe(), plugin=True, verify_ct=90, correct=6)
    ),
    "greedy output changed": lambda e, lo: _plugin(
        e, _launch(lo, recorded_probe(), plugin=True, changed_at=20)
    ),
    # Registered, then nothing: stock's sizing, no breakdown, no warning.
    "silently stepping aside": lambda e, lo: _plugin(e, dataclasses.replace(e.stock, control=None)),
    "CUDA-graph batch list changed": lambda e, lo: _plugin(
        e, _launch(lo, recorded_probe(), plugin=True, bs=BATCH_LIST[:-1])
    ),
}


def verdict_table(
    launch_of: LaunchOf, release: gpu_release.ReleaseSettings
) -> dict[str, list[str]]:
    working = working_case(launch_of, release)
    return {name: failing_checks(broken(working, launch_of)) for name, broken in BROKEN.items()}


def describe(table: Mapping[str, Sequence[str]]) -> str:
    return "\n".join(
        f"| {name} | {', '.join(checks) or 'none'} |" for name, checks in table.items()
    )
