"""The ``hf download`` commands that fetch what the GPU suite's servers load, and nothing else."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping

from harness.gpu import gpu_cases

INCLUDE = ("*.safetensors", "pytorch_model*.bin", "*.json", "tokenizer*", "*.py")


def commands(env: Mapping[str, str] | None = None) -> list[str]:
    """One ``hf download`` (``$HF``: the CLI) per hub id the cases launch, of what SGLang loads."""
    env = os.environ if env is None else env
    root = env.get(gpu_cases.MODEL_DIR_ENV, "").strip() or "models"
    include = " ".join(shlex.quote(p) for p in INCLUDE)
    specs = gpu_cases.PROFILES[gpu_cases.profile_name(env)]
    models = dict.fromkeys(m for spec in specs for m in (spec.target, spec.draft) if m)
    return [
        f'"${{HF:-hf}}" download {shlex.quote(m)} --include {include} '
        f"--local-dir {shlex.quote(os.path.join(root, m))}"
        for m in models
    ]


if __name__ == "__main__":
    print("set -euo pipefail")
    for line in commands():
        print(line)
