"""The draft's layer count read before loading (upstream's ``eagle_draft_num_layers``), 0.5.13.x."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.launch.engine import cpu_engine_kwargs
from sglang_specinit.live_sizing import DraftDescription
from sglang_specinit.sglang_0_5_13 import model_runner
from sglang_specinit.sglang_0_5_13 import scheduler as scheduler_phases

WARNING_TEXT = "[specinit] the draft runners allocate"


def _server_args(target: Path, **kwargs: Any) -> Any:
    """0.5.13.post1's ``ServerArgs`` for a CPU launch, the ``SGLANG_*`` it exports undone."""
    from sglang.srt.server_args import ServerArgs

    saved = dict(os.environ)
    try:
        return ServerArgs(**cpu_engine_kwargs(target, **kwargs))
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.mark.parametrize(
    ("algorithm", "draft", "layers"),
    [
        ("EAGLE", eagle_drafts.tiny_eagle_draft, eagle_drafts.DEFAULT_EAGLE_DRAFT.layers),
        ("EAGLE3", eagle_drafts.tiny_eagle3_draft, eagle_drafts.DEFAULT_EAGLE3_DRAFT.layers),
        # An explicit 0 is "absent" for 0.5.13's runner: it still allocates its one layer.
        (
            "EAGLE3",
            lambda: eagle_drafts.tiny_eagle3_draft(num_nextn_predict_layers=0),
            eagle_drafts.DEFAULT_EAGLE3_DRAFT.layers,
        ),
        (
            "STANDALONE",
            llama_family.tiny_standalone_draft,
            llama_family.DEFAULT_STANDALONE_DRAFT.layers,
        ),
        # A draft upstream does not count: no count.
        ("DFLASH", eagle_drafts.tiny_dflash_draft, None),
    ],
    ids=["eagle", "eagle3", "eagle3-nnpl0", "standalone", "dflash"],
)
def test_count_read_from_the_draft_config(algorithm: str, draft: Any, layers: int | None) -> None:
    args = _server_args(
        llama_family.tiny_llama_target(), draft_model_path=draft(), algorithm=algorithm
    )
    assert model_runner.early_draft_num_layers(args) == layers


def test_pathless_mtp_count_leaves_the_targets_cached_config_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from harness.checkpoints import tiny_configs
    from sglang.srt.configs.model_config import ModelConfig
    from sglang_specinit.sglang_0_5_13 import model_config as adapter_model_config

    original = ModelConfig._config_draft_model
    monkeypatch.setattr(
        ModelConfig,
        "_config_draft_model",
        lambda self: adapter_model_config.config_draft_model(original, self),
    )
    target = tiny_configs.tiny_config_dir("deepseek-v3")
    args = _server_args(target, algorithm="EAGLE")
    assert args.speculative_draft_model_path == str(target)  # SGLang filled it in
    target_config = ModelConfig.from_server_args(args)  # as the Scheduler builds it first
    hf_config = target_config.hf_config
    before = hf_config.to_dict()
    assert model_runner.early_draft_num_layers(args) == before["num_nextn_predict_layers"] == 1
    assert target_config.hf_config is hf_config
    assert hf_config.to_dict() == before
    assert hf_config.architectures == ["DeepseekV3ForCausalLM"]
    # The target's worker builds its ModelConfig again, from the same cache: still the target.
    assert ModelConfig.from_server_args(args).hf_config.architectures == ["DeepseekV3ForCausalLM"]


def _runners(*layers: int) -> list[SimpleNamespace]:
    """Test doubles: draft ModelRunners reduced to the layer count each pool is built with."""
    return [SimpleNamespace(num_effective_layers=n) for n in layers]


# (the count read before loading, the draft's runners, the warning's opening; None: silence)
PHASE3 = [
    (1, DraftDescription(pool_runners=_runners(1)), None),
    # Multi-layer EAGLE: one runner per step, each with the one layer the config gives.
    (1, DraftDescription(pool_runners=_runners(1, 1, 1)), None),
    # No count read (not an EAGLE-family draft): nothing to compare.
    (None, DraftDescription(pool_runners=_runners(4)), None),
    (1, DraftDescription(pool_runners=_runners(2)), "2 KV layers"),
    # A fixed-size pool's runner (frozen-KV MTP's stand-in) is compared too.
    (2, DraftDescription(fixed_pools=[(*_runners(3), 64)]), "3 KV layers"),
]


@pytest.mark.parametrize(("early", "draft", "opening"), PHASE3)
def test_phase3_warns_once_when_a_runner_allocates_another_count(
    caplog: pytest.LogCaptureFixture, early: int | None, draft: DraftDescription, opening: str
) -> None:
    """``init_memory_pools`` on a Scheduler double whose target pool exists; the draft allocates."""
    allocations: list[dict[str, Any]] = []
    target = SimpleNamespace(
        memory_pool_config="config", _specinit_sizing=SimpleNamespace(draft=draft)
    )
    scheduler = SimpleNamespace(
        _specinit_eagle_draft_num_layers=early,
        tp_worker=SimpleNamespace(
            model_runner=target, get_memory_pool=lambda: ("req_to_token", "allocator")
        ),
        draft_worker=SimpleNamespace(alloc_memory_pool=lambda **kw: allocations.append(kw)),
        init_target_memory_pool=lambda: None,
    )
    with caplog.at_level(logging.WARNING, logger=model_runner.logger.name):
        scheduler_phases.init_memory_pools(scheduler)
    assert len(allocations) == 1  # the draft's pools were allocated first
    found = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(found) == (opening is not None), found
    if opening is not None:
        assert found[0].startswith(f"{WARNING_TEXT} {opening}"), found
        assert f"eagle_draft_num_layers={early}" in found[0], found
