"""The 0.5.23 planner on a CUDA host prices its pools on the real GPU, as the server does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness.gpu import gpu_release

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "llama31-8b-eagle3"
TIMEOUT_S = 600
# The example's prices as the CPU suite plans them (pools built on cpu): Llama-3.1-8B's 32
# layers x 8 KV heads x 128 x (K, V) x 2 bytes (bf16), and its one-layer EAGLE3 draft's.
CPU_PRICED = {"target_kv_bytes_per_token": 131072, "draft_kv_bytes_per_token": 4096}

# Run in the 0.5.23 environment: the example's launch published with device cuda at the
# plan's page size, each pool priced by the server's function.
IN_PROCESS_PRICES = """
import json, sys
from sglang_specinit.planner.shipped_examples import EXAMPLES_DIR
from sglang_specinit.sglang_0_5_23.offline_configurator import published_layout
from sglang_specinit.sglang_0_5_23.runtime_budget import price_configurators

example = EXAMPLES_DIR / sys.argv[1]
launch = {k: v for k, v in json.loads((example / "example.json").read_text())["launch"].items()
          if v is not None}
for key in ("model_path", "speculative_draft_model_path"):
    launch[key] = str((example / launch[key]).resolve())
launch["page_size"] = int(sys.argv[2])
layout = published_layout(device="cuda", **launch)
target, drafts, fixed = price_configurators(layout.target, layout.drafts, [])
print(json.dumps({
    "device": str(layout.target.device),
    "target_kv_bytes_per_token": int(target.bytes_per_token()),
    "draft_kv_bytes_per_token": int(sum(d.bytes_per_token() for d in drafts)),
    "fixed": fixed,
}))
"""


def python_0523() -> Path:
    # The workflow's 0.5.23 job runs the suite in a 0.5.23 venv of its own: this interpreter.
    here = sys.executable if gpu_release.installed_release() == "0.5.23" else None
    default = here or REPO / ".venv-sglang0523" / "bin" / "python"
    path = Path(os.environ.get("SPECINIT_SGLANG0523_PYTHON", default))
    if not path.exists():
        pytest.skip(f"no sglang 0.5.23 environment at {path} (SPECINIT_SGLANG0523_PYTHON)")
    return path


def run_json(argv: list[str]) -> dict:
    # This runner's environment without a CPU-engine switch or a test double on the path.
    drop = ("SGLANG_USE_CPU_ENGINE", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_0_5_23_plan_prices_pools_on_this_gpu_as_the_server_does() -> None:
    python = python_0523()
    planned = run_json(
        [str(python), "-m", "sglang_specinit.planner.cli", "plan", "--example", EXAMPLE, "--json"]
    )
    priced = run_json([str(python), "-c", IN_PROCESS_PRICES, EXAMPLE, str(planned["page_size"])])
    assert priced["device"].startswith("cuda"), priced
    assert priced["fixed"] == 0
    for key, cpu_price in CPU_PRICED.items():
        assert planned[key] == priced[key], (key, planned[key], priced[key])
        assert planned[key] == cpu_price, (key, planned[key], cpu_price)
