"""Real servers on a GPU: memory stays inside --mem-fraction-static and drafts really draft.

Each case launches ``python -m sglang.launch_server`` with the plugin installed, at a high
``--mem-fraction-static``, reads the scheduler's memory breakdown (``SGLANG_SPECINIT_REPORT_DIR``)
and sends one greedy request. Models are chosen per case with env vars
``SPECINIT_GPU_<CASE>_TARGET`` / ``_DRAFT`` / ``_TP`` (defaults below are public checkpoints);
``SPECINIT_GPU_MEM_FRACTION`` sets the fraction (default 0.9).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from gpu_server import launch_server, stop_server

pytestmark = pytest.mark.gpu

SPEC_CHAIN = [
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
]


@dataclass(frozen=True)
class Case:
    name: str
    target: str
    draft: str | None
    args: tuple[str, ...]
    tp: int = 1
    prompt: str = "List the first ten prime numbers, separated by commas:"

    def env(self, key: str, default: str) -> str:
        return os.environ.get(f"SPECINIT_GPU_{self.name.upper()}_{key}", default)


CASES = (
    Case(
        "eagle3",
        "meta-llama/Llama-3.1-8B-Instruct",
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        ("--speculative-algorithm", "EAGLE3", *SPEC_CHAIN),
    ),
    Case(
        "standalone",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.2-1B-Instruct",
        ("--speculative-algorithm", "STANDALONE", *SPEC_CHAIN),
    ),
    Case(
        "multi_layer_mtp",
        "XiaomiMiMo/MiMo-V2-Flash",
        "XiaomiMiMo/MiMo-V2-Flash",
        (
            "--speculative-algorithm",
            "EAGLE",
            "--enable-multi-layer-eagle",
            "--trust-remote-code",
            *SPEC_CHAIN,
        ),
        tp=8,
    ),
    Case(
        "dflash",
        "Qwen/Qwen3-8B",
        "z-lab/Qwen3-8B-DFlash-b16",
        ("--speculative-algorithm", "DFLASH"),
    ),
    # No draft model: the worker is built in the pool phase; a repetitive prompt gives the
    # n-gram matcher something to propose.
    Case(
        "ngram",
        "meta-llama/Llama-3.1-8B-Instruct",
        None,
        ("--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"),
        prompt="Repeat exactly ten times: alpha beta gamma delta. alpha beta gamma delta.",
    ),
)


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_server_memory_within_budget_and_drafts_accepted(case: Case, tmp_path: Path) -> None:
    tp = int(case.env("TP", str(case.tp)))
    if _gpu_count() < tp:
        pytest.skip(f"{case.name} needs {tp} GPUs, this runner has {_gpu_count()}")
    fraction = os.environ.get("SPECINIT_GPU_MEM_FRACTION", "0.9")
    args = [
        "--model-path",
        case.env("TARGET", case.target),
        "--tp",
        str(tp),
        "--mem-fraction-static",
        fraction,
        *case.args,
    ]
    if case.draft is not None:
        args += ["--speculative-draft-model-path", case.env("DRAFT", case.draft)]
    server = launch_server(args, tmp_path)
    try:
        breakdowns = server.breakdowns()
        assert len(breakdowns) == tp, server.log_tail()
        for b in breakdowns:
            _check_breakdown(b)
        assert server.get("/get_server_info")["max_total_num_tokens"] == breakdowns[0]["tokens"]

        out = server.post(
            "/generate",
            {
                "text": case.prompt,
                "sampling_params": {"temperature": 0, "max_new_tokens": 64},
            },
        )
        meta = out["meta_info"]
        assert meta["completion_tokens"] > 0
        assert meta["spec_accept_length"] > 1.0, meta
    finally:
        stop_server(server)


def _check_breakdown(b: dict) -> None:
    page_tokens = b["page_size"]
    counted = (
        b["resident_bytes"]
        + b["allocated_target_kv_pool_bytes"]
        + b["allocated_draft_kv_pool_bytes"]
        + b.get("draft_request_bytes", 0)
    )
    # Weights + all KV pools inside f x free, and the budget actually used.
    assert counted <= b["budget_bytes"], b
    assert counted >= 0.99 * b["budget_bytes"], b
    # The pools SGLang allocated are the planned ones, to within one page of tokens.
    assert abs(b["allocated_target_kv_pool_bytes"] - b["target_kv_pool_bytes"]) <= (
        page_tokens * b["target_kv_bytes_per_token"]
    ), b
    assert abs(b["allocated_draft_kv_pool_bytes"] - b["draft_kv_pool_bytes"]) <= (
        page_tokens * max(b["draft_kv_bytes_per_token"], 1)
    ), b
    # What torch holds on the device covers everything the breakdown counts, and the device
    # still has free memory after backends and graphs were built.
    assert b["cuda_torch_allocated_bytes"] >= counted - b["resident_bytes"], b
    assert b["cuda_free_bytes_after_init"] > 0, b
