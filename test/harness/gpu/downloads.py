"""The ``hf download`` commands that fetch what the GPU suite's servers load, and nothing else.

Why: a plain ``hf download meta-llama/Llama-3.1-8B-Instruct`` also fetches ``original/`` (the
consolidated ``.pth`` checkpoint, ~16 GB SGLang never reads). SGLang loads the safetensors
shards and their index (or, for a draft head published as such, ``pytorch_model*.bin``), the
configs, the tokenizer files and, with ``--trust-remote-code`` (DFLASH, multi-layer MTP), the
model's own ``*.py``; :data:`INCLUDE` is exactly that.

``python -m harness.gpu.downloads`` prints one command per model of the selected profile
(``SPECINIT_GPU_PROFILE``) into ``$SPECINIT_GPU_MODEL_DIR/<org>/<name>``; the workflow runs them.
"""

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
