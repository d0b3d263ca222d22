"""The ``hf download`` commands that fetch what the GPU suite's servers load, and nothing else."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping

from harness.gpu import gpu_cases

INCLUDE = ("*.safetensors", "pytorch_model*.bin", "*.json", "tokenizer*", "*.py")


def models(env: Mapping[str, str] | None = None) -> list[str]:
    """Every hub id the selected profile's cases launch, each once, in case order."""
    env = os.environ if env is None else env
    found: list[str] = []
    for spec in gpu_cases.PROFILES[gpu_cases.profile_name(env)]:
        for model in (spec.target, spec.draft):
            if model and model not in found:
                found.append(model)
    return found


def commands(env: Mapping[str, str] | None = None) -> list[str]:
    """One ``hf download`` per model, only the files SGLang loads (``$HF`` names the CLI)."""
    env = os.environ if env is None else env
    root = env.get(gpu_cases.MODEL_DIR_ENV, "").strip() or "models"
    include = " ".join(shlex.quote(p) for p in INCLUDE)
    return [
        f'"${{HF:-hf}}" download {shlex.quote(m)} --include {include} '
        f"--local-dir {shlex.quote(os.path.join(root, m))}"
        for m in models(env)
    ]


if __name__ == "__main__":
    print("set -euo pipefail")
    for line in commands():
        print(line)
