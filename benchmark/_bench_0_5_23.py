"""Measure budget use on the real sglang 0.5.23 init (run by bench_budget.py in .venv-sglang0523).

For each draft kind it launches the tiny Engine on device cpu with the plugin on and off
(alternating, one launch each; the quantities are deterministic byte counts of the simulated
device, so there is nothing to take a median of) and prints one JSON object per kind with
what both runs measured. Nothing is asserted.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))

from harness.launch.launch_0_5_23 import launch  # noqa: E402

KINDS = ("EAGLE", "EAGLE3", "EAGLE3-nnpl0", "STANDALONE")
FRACTION = 0.5


def measure(kind: str, root: Path) -> dict:
    patched = launch(kind, True, root)
    stock = launch(kind, False, root)
    budget = int(FRACTION * patched.pre_load_free_bytes)
    memory = patched.memory or {}
    duplicates_stock = stock.resident_at_profile - patched.resident_at_profile

    def draft_bytes_per_token(run) -> int:
        pools = [r["kv_pool"] for r in run.draft_runners()]
        return sum((p["k_bytes"] + p["v_bytes"]) // (p["size"] + p["page_size"]) for p in pools)

    def used(run, freed_after_profile: int) -> int:
        return run.resident_at_profile - freed_after_profile + run.kv_pool_bytes()

    target_cell = patched.runner("target")["kv_pool"]
    target_per_token = (target_cell["k_bytes"] + target_cell["v_bytes"]) // (
        target_cell["size"] + target_cell["page_size"]
    )
    return {
        "kind": kind,
        "budget": budget,
        "upstream_reserve_per_token": stock.runner("target")["sglang_cell_size"] - target_per_token,
        "draft_allocates_per_token": draft_bytes_per_token(stock),
        "our_price_per_token": memory.get("draft_kv_bytes_per_token"),
        "tokens_stock": stock.runner("target")["max_total_num_tokens"],
        "tokens_patched": patched.runner("target")["max_total_num_tokens"],
        "used_stock": used(stock, duplicates_stock),
        "used_patched": used(patched, 0),
        "duplicates_at_profile_stock": duplicates_stock,
        # What is resident at profiling besides both models' weights (each shared tensor
        # once) and EAGLE3's hot-token map (int64, bound early): no duplicate is left.
        "duplicates_at_profile_patched": patched.resident_at_profile
        - memory.get("target_weight_bytes", 0)
        - memory.get("draft_weight_bytes", 0)
        - 8 * (patched.report["draft"]["hot_token_id_len"] or 0),
    }


def main() -> None:
    kinds = sys.argv[1:] or list(KINDS)
    root = Path(tempfile.mkdtemp(prefix="bench0523-"))
    for kind in kinds:
        print("BENCH0523 " + json.dumps(measure(kind, root)), flush=True)


if __name__ == "__main__":
    main()
