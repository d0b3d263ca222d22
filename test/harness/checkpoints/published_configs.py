"""Published model configs (no weights) for tests that price pools: shipped examples plus two
written from published hyperparameters (DeepSeek-V3.2's DSA indexer, Qwen3-Next's hybrid)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sglang_specinit.planner.shipped_examples import EXAMPLES_DIR

# The installed package's shipped examples (not the checkout's copy: tests run what is installed).
EXAMPLES = EXAMPLES_DIR


def model_config(path: Path, overrides: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """SGLang's ``ModelConfig`` of a config directory."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang_specinit.planner.replay import cuda_quantization_names

    with cuda_quantization_names():  # gpt-oss's mxfp4 is only registered on CUDA builds
        return ModelConfig(
            str(path), override_config_file=json.dumps(overrides) if overrides else None, **kwargs
        )


def dsa_config_dir(tmp_path: Path) -> Path:
    """DeepSeek-V3's config with the DSA indexer fields of DeepSeek-V3.2."""
    config = json.loads((EXAMPLES / "deepseek-v3-mtp" / "target" / "config.json").read_text())
    config.update(
        architectures=["DeepseekV32ForCausalLM"],
        index_head_dim=128,
        index_n_heads=64,
        index_topk=2048,
    )
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def qwen3_next_config_dir(tmp_path: Path) -> Path:
    """Qwen3-Next-80B-A3B: SGLang's ``Qwen3NextConfig`` defaults are its published values."""
    config = {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "full_attention_interval": 4,
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 262144,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


# name -> a function of a scratch directory returning the config directory
CASES: dict[str, Callable[[Path], Path]] = {
    "llama31-8b": lambda tmp: EXAMPLES / "llama31-8b-eagle3" / "target",
    "llama31-8b-eagle3-draft": lambda tmp: EXAMPLES / "llama31-8b-eagle3" / "draft",
    "llama31-70b": lambda tmp: EXAMPLES / "llama31-70b-eagle-tp4" / "target",
    "deepseek-v3-mla": lambda tmp: EXAMPLES / "deepseek-v3-mtp" / "target",
    "deepseek-v32-dsa": dsa_config_dir,
    "qwen3-moe": lambda tmp: EXAMPLES / "qwen3-moe-eagle3" / "target",
    "gpt-oss-20b-swa": lambda tmp: EXAMPLES / "gpt-oss-20b-eagle3" / "target",
}
