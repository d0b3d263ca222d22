"""What the 0.5.23 layout tests share: published launches' flags, 0.5.23's configurators for
a launch built without weights, a runner test double, and the layout matrices' fixture."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
from harness.checkpoints.published_configs import EXAMPLES, dsa_config_dir
from harness.matrices.step_aside import example_dir, made_dir, markdown_table, resolved

GIB = 1 << 30
SPEC_CHAIN = {
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}
DEEPSEEK_MTP = {
    "model_path": example_dir("deepseek-v3-mtp", "target"),
    "speculative_algorithm": "EAGLE",
    "trust_remote_code": True,
    **SPEC_CHAIN,
}
LLAMA_EAGLE3 = {
    "model_path": example_dir("llama31-8b-eagle3", "target"),
    "speculative_draft_model_path": example_dir("llama31-8b-eagle3", "draft"),
    "speculative_algorithm": "EAGLE3",
    **SPEC_CHAIN,
}
DSA_MTP = {**DEEPSEEK_MTP, "model_path": lambda tmp: str(dsa_config_dir(made_dir(tmp / "dsa")))}


def nnpl0_draft(tmp: Path) -> str:
    draft = tmp / "eagle3-nnpl0"
    shutil.copytree(EXAMPLES / "llama31-8b-eagle3" / "draft", draft, dirs_exist_ok=True)
    config = json.loads((draft / "config.json").read_text())
    config["num_nextn_predict_layers"] = 0
    (draft / "config.json").write_text(json.dumps(config))
    return str(draft)


def draft_config(tmp: Path, example: str, **changes: Any) -> str:
    """A scratch copy of a shipped draft's config with ``changes`` (a draft no example ships)."""
    config = json.loads((EXAMPLES / example / "draft" / "config.json").read_text())
    made_dir(tmp).joinpath("config.json").write_text(json.dumps({**config, **changes}))
    return str(tmp)


def gpt_oss_swa_cap(draft: str | Callable[[Path], str]) -> dict[str, Any]:
    """Radix off, ``--max-running-requests 16``: 0.5.23's ``SWARequestCapPoolConfigurator``."""
    return {
        "model_path": example_dir("gpt-oss-20b-eagle3", "target"),
        "speculative_draft_model_path": draft,
        "speculative_algorithm": "EAGLE3",
        "attention_backend": "triton",
        "disable_radix_cache": True,
        "max_running_requests": 16,
        **SPEC_CHAIN,
    }


def published(
    args: dict[str, Any], tmp: Path, capability: tuple[int, int] = (9, 0), **more: Any
) -> Any:
    """0.5.23's configurators for the launch ``args`` (callables of ``tmp`` resolved), built
    without weights on an H100/H200's compute capability (a test double: SGLang's DSA
    defaults read it); ``more``: ``published_layout``'s other arguments."""
    from sglang_specinit.sglang_0_5_23.offline_configurator import published_layout

    with mock.patch("torch.cuda.get_device_capability", return_value=capability):
        return published_layout(**more, **resolved(args, tmp))


class RunnerDouble:
    """TEST DOUBLE of a ``ModelRunner`` (no weights can be loaded here): the readings the
    plugin takes off a runner, from the configurator 0.5.23 builds for it, and its own
    ``init_kv_cache_configurator`` handing that configurator back."""

    def __init__(self, configurator: Any, model: torch.nn.Module | None = None) -> None:
        self._configurator = configurator
        self.model = torch.nn.Module() if model is None else model
        self.device, self.gpu_id = "cpu", 0
        for name in ("model_config", "kv_cache_dtype", "layer_info", "spec_aux_config"):
            setattr(self, name, getattr(configurator, name))

    def init_kv_cache_configurator(self, draft_parallel_layout: Any = None) -> None:
        assert draft_parallel_layout is None  # draft workers pass none (pool_probe)
        self.kv_cache_configurator = self._configurator


def layout_matrix(
    cells: Sequence[Any],
    evaluate: Callable[[Any, Path], Any],
    table_env: str,
    header: Sequence[str],
    row: Callable[[Any], Sequence[str]],
) -> Any:
    """The module's ``matrix`` fixture: every cell (``skip``-less) evaluated once, by name; its
    table (``header`` / ``row`` columns, then tokens and budget use, stock -> plugin) printed,
    and written where ``table_env`` names a file."""

    @pytest.fixture(scope="module")
    def matrix(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        root = tmp_path_factory.mktemp("layouts")
        results = {
            c.name: evaluate(c, made_dir(root / str(i)))
            for i, c in enumerate(cells)
            if not getattr(c, "skip", "")
        }
        table = markdown_table(
            ("layout", *header, "tokens stock -> plugin", "budget use stock -> plugin"),
            [
                (name, *row(r), f"{r.stock_tokens:,} -> {r.plugin_tokens:,}",
                 f"{100 * r.stock_used / r.budget:.2f} % -> {100 * r.plugin_used / r.budget:.2f} %")
                for name, r in results.items()
            ],
        )  # fmt: skip
        print("\n" + table)
        if os.environ.get(table_env):
            Path(os.environ[table_env]).write_text(table)
        return results

    return matrix
