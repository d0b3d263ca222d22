"""``plan`` with an FP4 KV cache, made on this CPU host for a GPU: the release's own KV4 check
and pool classes give the verdict and the bytes."""

from __future__ import annotations

import pytest
from harness.planner_cli import run_cli
from harness.releases import installed_row

# DeepSeek-V3's MLA row (512 + 64 values) in an FP4 pool: half a byte a value plus a one-byte
# scale per 16 values, on each of its 61 layers.
MLA_FP4_BYTES = 61 * ((512 + 64) // 2 + (512 + 64) // 16)
# Llama-3.1-8B's: K and V, 8 KV heads of 128 values, 32 layers.
MHA_FP4_BYTES = 32 * 2 * 8 * (128 // 2 + 128 // 16)
LLAMA, DEEPSEEK = ["--example", "llama31-8b-eagle3"], ["--example", "deepseek-v3-mtp"]

# adapter -> (flags, exit code, a needle of the refusal / note, or the target's KV bytes a token);
# on device cpu: plan_verdicts' fp4-kv-on-cpu row.
ROWS = {
    "sglang_0_5_13": [
        ([*LLAMA, "--attention-backend", "fa3"], 2, "attention_backend to be one of"),
        # Its MHA FP4 pool sets no copy strides, which a speculative launch's pool reads.
        (LLAMA, 2, "'MHATokenToKVPoolFP4' object has no attribute 'data_strides'"),
        ([*DEEPSEEK, "--attention-backend", "flashmla"], 0, MLA_FP4_BYTES),
        (DEEPSEEK, 0, "not checked: SGLang's KV4 check of --kv-cache-dtype fp4_e2m1"),
    ],
    "sglang_0_5_23": [
        ([*LLAMA, "--gpu", "B200", "--kv-cache-dtype", "fp4_mx_block16"], 0, MHA_FP4_BYTES),
        ([*LLAMA, "--gpu", "B200", "--kv-cache-dtype", "nvfp4"], 2,
         "cannot price an nvfp4 KV cache on a host without CUDA"),
    ],
}  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "code", "expect"), ROWS.get(getattr(installed_row(), "adapter", None), [])
)
def test_fp4_kv_plan(flags: list[str], code: int, expect: str | int) -> None:
    if installed_row().adapter == "sglang_0_5_13":
        flags = [*flags, "--kv-cache-dtype", "fp4_e2m1"]
    planned = run_cli(["plan", "--json", *flags])
    if code:
        assert planned.code == code and expect in planned.refusal_line(), planned.err
        return
    plan = planned.json()
    if isinstance(expect, int):
        assert plan["target_kv_bytes_per_token"] == plan["stock"]["target_kv_bytes_per_token"]
        assert plan["target_kv_bytes_per_token"] == expect
    else:
        assert any(expect in note["text"] for note in plan["notes"]), plan["notes"]
