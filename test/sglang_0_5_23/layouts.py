"""What the 0.5.23 layout matrices share: published launches built without weights, their
per-rank weights, the pools they build, runner and scheduler test doubles, the matrices' fixture."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple
from unittest import mock

import pytest
import torch
from harness.checkpoints.published_configs import EXAMPLES, dsa_config_dir, qwen3_next_config_dir
from sglang_specinit.pool_measure import kv_pool_storages, pool_logs_quiet
from sglang_specinit.sglang_0_5_23.offline_configurator import published_layout
from sglang_specinit.sglang_0_5_23.pool_probe import tiny_mamba_cache

GIB = 1 << 30
SPEC_CHAIN = dict(speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)


def example_dir(example: str, role: str) -> Callable[[Path], str]:
    return lambda tmp: str(EXAMPLES / example / role)


def example_launch(example: str, algorithm: str, **args: Any) -> dict[str, Any]:
    """A shipped example's target and draft as ``algorithm`` (steps 3, top-k 1, 4 tokens)."""
    return {
        "model_path": example_dir(example, "target"),
        "speculative_draft_model_path": example_dir(example, "draft"),
        "speculative_algorithm": algorithm,
        **SPEC_CHAIN,
        **args,
    }


def made_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolved(args: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """``args`` with each callable of a scratch dir replaced by its value for ``tmp``."""
    tmp.mkdir(parents=True, exist_ok=True)
    return {k: (v(tmp) if callable(v) else v) for k, v in args.items()}


DEEPSEEK_MTP = {
    "model_path": example_dir("deepseek-v3-mtp", "target"),
    "speculative_algorithm": "EAGLE",
    "trust_remote_code": True,
    **SPEC_CHAIN,
}
LLAMA_EAGLE3 = example_launch("llama31-8b-eagle3", "EAGLE3")
DSA_MTP = {**DEEPSEEK_MTP, "model_path": lambda tmp: str(dsa_config_dir(made_dir(tmp / "dsa")))}
LLAMA70B_PP2 = example_launch("llama31-70b-eagle-tp4", "EAGLE", tp_size=4, pp_size=2)
QWEN3_NEXT = {  # NEXTN with no draft path: the MTP block of the target's checkpoint
    "model_path": lambda tmp: str(qwen3_next_config_dir(made_dir(tmp / "qwen3-next"))),
    "speculative_algorithm": "NEXTN",
    "disable_radix_cache": True,
    **SPEC_CHAIN,
}


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
    return example_launch(
        "gpt-oss-20b-eagle3",
        "EAGLE3",
        speculative_draft_model_path=draft,
        attention_backend="triton",
        disable_radix_cache=True,
        max_running_requests=16,
    )


def published(
    args: dict[str, Any], tmp: Path, capability: tuple[int, int] = (9, 0), **more: Any
) -> Any:
    """0.5.23's configurators for ``args`` (resolved for ``tmp``), built without weights on a
    test double's compute ``capability``; ``more``: ``published_layout``'s other arguments."""
    with mock.patch("torch.cuda.get_device_capability", return_value=capability):
        return published_layout(**more, **resolved(args, tmp))


class Weights(NamedTuple):
    """Per-rank bytes: the target's, the draft's own (after binding), the draft tensors that
    duplicate the target's until 0.5.23 binds them (resident while stock profiles)."""

    target: int
    draft: int
    duplicates: int

    def stock_peak(self, target_pool: int, draft_pool: int) -> int:
        """Stock's peak: the target pool built with the duplicates resident, the drafts' after."""
        return self.target + self.draft + target_pool + max(self.duplicates, draft_pool)


def weights_size(example: str, role: str) -> dict[str, Any]:
    return json.loads((EXAMPLES / example / role / "weights-size.json").read_text())


def example_weights(
    example: str, shared: tuple[str, ...], tp: int = 1, absent_costs_target: bool = False
) -> Weights:
    """Checkpoint bytes / TP; ``shared``: the draft tensors 0.5.23 binds to the target's (one
    the draft lacks costs nothing, or its target tensor if ``absent_costs_target``)."""
    target, draft = weights_size(example, "target"), weights_size(example, "draft")
    own = sum(draft["tensors"].get(name, 0) for name in shared)
    dup = sum(
        draft["tensors"].get(name, target["tensors"][name] if absent_costs_target else 0)
        for name in shared
    )
    return Weights(target["total_bytes"] // tp, (draft["total_bytes"] - own) // tp, dup // tp)


def deepseek_mtp_weights(tp: int) -> Weights:
    size = weights_size("deepseek-v3-mtp", "target")
    mtp = size["groups"]["model.layers.61."]
    tensors = size["tensors"]
    dup = sum(tensors[f"model.layers.61.{n}.weight"] for n in ("embed_tokens", "shared_head.head"))
    return Weights((size["total_bytes"] - mtp) // tp, (mtp - dup) // tp, dup // tp)


@dataclass(frozen=True)
class Launch:
    """One row of a layout matrix: a published launch, its per-rank weights, its GPU."""

    name: str
    args: dict[str, Any]  # ServerArgs fields; callables of a scratch dir are resolved
    weights: Callable[[], Weights]
    device_gib: float = 140.0
    mem_fraction_static: float = 0.85
    capability: tuple[int, int] = (9, 0)  # H100/H200 (SGLang's DSA and V4 defaults read it)

    @property
    def budget(self) -> int:
        return int(self.mem_fraction_static * self.device_gib * GIB)

    def publish(self, tmp: Path, **more: Any) -> Any:
        return published(self.args, tmp, self.capability, **more)


@dataclass
class Sized:
    """A matrix cell sized both ways: stock's tokens and peak bytes, the plugin's, the budget."""

    cell: Any
    page: int
    budget: int
    stock_tokens: int
    stock_used: int
    plugin_tokens: int
    plugin_used: int


def built_bytes(target: Any, drafts: Sequence[Any], config: Any) -> tuple[int, int]:
    """(target KV bytes, every draft's KV bytes) when the launch builds its pools from
    ``config``: storages each KV pool owns, not the shared request pool or allocator."""
    with pool_logs_quiet(), tiny_mamba_cache(target):
        pools = target._init_pools(
            sizes=target._derive_pool_sizes(config=config),
            req_to_token_pool=None,
            token_to_kv_pool_allocator=None,
        )
        req, alloc = pools.req_to_token_pool, pools.token_to_kv_pool_allocator
        target_bytes = sum(kv_pool_storages(pools.token_to_kv_pool, req, alloc).values())
        draft_bytes = 0
        for draft in drafts:
            built = draft._init_pools(
                sizes=draft._derive_pool_sizes(config=config),
                req_to_token_pool=req,
                token_to_kv_pool_allocator=alloc,
            )
            draft_bytes += sum(kv_pool_storages(built.token_to_kv_pool, req, alloc).values())
    return target_bytes, draft_bytes


def at_pp_stage(kvc: Any, rank: int, size: int) -> None:
    """Give ``kvc`` PP stage ``rank``'s layers (a namespace stands in for the loaded model)."""
    from sglang.srt.distributed.utils import get_pp_indices
    from sglang.srt.model_executor.model_runner_components import layer_setup

    start, end = get_pp_indices(kvc.model_config.num_hidden_layers, rank, size)
    kvc.layer_info = layer_setup.resolve_layer_indices(
        model=SimpleNamespace(start_layer=start, end_layer=end),
        model_config=kvc.model_config,
        is_draft_worker=False,
    )


class RunnerDouble:
    """TEST DOUBLE of a ``ModelRunner`` without weights: what the plugin reads off a runner,
    from ``configurator``, which ``init_kv_cache_configurator`` hands back."""

    def __init__(self, configurator: Any, model: torch.nn.Module | None = None) -> None:
        self._configurator = configurator
        self.model = torch.nn.Module() if model is None else model
        self.device, self.gpu_id = "cpu", 0
        for name in ("model_config", "kv_cache_dtype", "layer_info", "spec_aux_config"):
            setattr(self, name, getattr(configurator, name))

    def init_kv_cache_configurator(self, draft_parallel_layout: Any = None) -> None:
        assert draft_parallel_layout is None  # draft workers pass none (pool_probe)
        self.kv_cache_configurator = self._configurator


def scheduler_double(layout: Any, algorithm: str = "EAGLE3", holds_draft: bool = True) -> Any:
    """TEST DOUBLE of the scheduler as the pool phase reads it: the target's runner (its
    ``model``, the weights, if set) and, if the rank ``holds_draft``, one draft runner."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    spec = getattr(SpeculativeAlgorithm, algorithm)
    (draft,) = layout.drafts
    worker = SimpleNamespace(
        speculative_algorithm=spec,
        draft_worker=SimpleNamespace(draft_runners=[RunnerDouble(draft)]),
    )
    return SimpleNamespace(
        spec_algorithm=spec,
        server_args=layout.server_args,
        model_config=layout.target.model_config,
        draft_worker=worker if holds_draft else None,
        tp_worker=SimpleNamespace(model_runner=RunnerDouble(layout.target, layout.target.model)),
    )


def layout_matrix(
    cells: Sequence[Launch],
    evaluate: Callable[[Any, Path], Sized],
    table_env: str,
    header: Sequence[str],
    row: Callable[[Any], Sequence[str]],
) -> Any:
    """The module's ``matrix`` fixture: each cell evaluated once, by name; its table
    (``header`` / ``row``, then stock -> plugin) printed, and written where ``table_env`` says."""

    @pytest.fixture(scope="module")
    def matrix(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        root = tmp_path_factory.mktemp("layouts")
        results = {c.name: evaluate(c, made_dir(root / str(i))) for i, c in enumerate(cells)}
        head = ("layout", *header, "tokens stock -> plugin", "budget use stock -> plugin")
        rows = [head] + [
            (name, *row(r), f"{r.stock_tokens:,} -> {r.plugin_tokens:,}",
             f"{100 * r.stock_used / r.budget:.2f} % -> {100 * r.plugin_used / r.budget:.2f} %")
            for name, r in results.items()
        ]  # fmt: skip
        lines = ["| " + " | ".join(cells) + " |" for cells in rows]
        table = "\n".join([lines[0], "|" + "---|" * len(head), *lines[1:]]) + "\n"
        print("\n" + table)
        if os.environ.get(table_env):
            Path(os.environ[table_env]).write_text(table)
        return results

    return matrix
