"""The CPU harness works against stock SGLang 0.5.13.post1 (plugin disabled).

These tests are the baseline every phased-init test builds on: if they fail, the harness
(tiny models, shims, scheduler reports, Engine driver) is broken, not the plugin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints import eagle_drafts, llama_family, llama_layout, tiny_vocab
from harness.cpu_doubles import shims
from harness.launch.engine import ENGINE_TEST_TIMEOUT_S, cpu_engine

# Harness self-checks whose Engines the phased tests start again with more assertions
# (test_phased_eagle: plain on/off tokens, EAGLE and EAGLE3 pools): SPECINIT_TEST_SLOW=1 only.
pytestmark = [
    pytest.mark.cpu_engine,
    pytest.mark.slow,
    pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S),
]


def _runners(report: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The target and the single draft ModelRunner of a scheduler report."""
    targets = [r for r in report["model_runners"] if r["role"] == "target"]
    drafts = [r for r in report["model_runners"] if r["role"] == "draft"]
    assert len(targets) == 1 and len(drafts) == 1, report["model_runners"]
    return targets[0], drafts[0]


def _pre_model_load_used_bytes(report: dict[str, Any]) -> int:
    """Meter usage at the target's pre-model-load measurement (in init_torch_distributed)."""
    readings = [
        r
        for r in report["meter"]["readings"]
        if r["caller"].endswith("ModelRunner.init_torch_distributed")
        and r["is_draft_worker"] is False
    ]
    assert readings, report["meter"]["readings"]
    return readings[0]["used_bytes"]


def _assert_stock_sglang(report: dict[str, Any]) -> None:
    assert report["sglang_plugins_env"] == "none-specinit-disabled"
    assert not report["specinit_loaded"]
    assert set(shims.shim_targets()) <= set(report["applied_hook_targets"])
    # The meter replaced the stale `from ... import get_available_gpu_memory` bindings too.
    callers = {r["caller"].rsplit(".", 2)[0] for r in report["meter"]["readings"]}
    assert {
        "sglang.srt.model_executor.model_runner",
        "sglang.srt.model_executor.model_runner_kv_cache_mixin",
        "sglang.srt.managers.scheduler",
    } <= callers, callers


def _assert_weights_loaded_by_name(log: Path) -> None:
    """SGLang's Llama loader warns for checkpoint names it has no parameter for."""
    assert "not found in params_dict" not in log.read_text(errors="replace")


def _assert_spec_pools(report: dict[str, Any], algorithm: str) -> tuple[dict, dict]:
    _assert_stock_sglang(report)
    assert report["scheduler"]["spec_algorithm"] == algorithm
    target, draft = _runners(report)
    tpool, dpool = target["kv_pool"], draft["kv_pool"]
    assert tpool["storage_bytes"] > 0 and dpool["storage_bytes"] > 0
    assert tpool["size"] == dpool["size"] == report["scheduler"]["max_total_num_tokens"]
    # The draft shares the target's request table and allocator, but owns its KV buffers.
    assert draft["req_to_token_pool_id"] == target["req_to_token_pool_id"]
    assert draft["token_to_kv_pool_allocator_id"] == target["token_to_kv_pool_allocator_id"]
    assert tpool["id"] != dpool["id"]
    meter = report["meter"]
    assert meter["used_bytes"] > _pre_model_load_used_bytes(report)
    assert meter["used_bytes"] >= tpool["storage_bytes"] + dpool["storage_bytes"]
    return tpool, dpool


def _kv_bytes(shape: llama_layout.TinyLlamaShape, pool: dict[str, Any]) -> int:
    """K (or V) bytes of a pool with ``size + page_size`` rows (slot 0 is padding)."""
    rows = pool["size"] + pool["page_size"]
    return rows * shape.layers * shape.kv_heads * shape.head_dim * shape.dtype_bytes


def test_plain_engine_generates_greedy_tokens(tiny_target: Path, tmp_path: Path) -> None:
    with cpu_engine(tiny_target, work_dir=tmp_path) as engine:
        out = engine.generate([tiny_vocab.prompt_text(5)], max_new_tokens=4)
        again = engine.generate([tiny_vocab.prompt_text(5)], max_new_tokens=4)
        report = engine.scheduler_report()
    _assert_weights_loaded_by_name(engine.log_path)
    assert len(out) == 1 and len(out[0]["output_ids"]) == 4
    assert out[0]["output_ids"] == again[0]["output_ids"]  # greedy is deterministic
    _assert_stock_sglang(report)
    assert report["scheduler"]["spec_algorithm"] == "NONE"
    (target,) = report["model_runners"]
    assert target["kv_pool"]["size"] == report["scheduler"]["max_total_num_tokens"] > 0


def test_eagle_engine_builds_target_and_draft_pools(
    tiny_target: Path, tiny_eagle_draft: Path, tmp_path: Path
) -> None:
    with cpu_engine(
        tiny_target, draft_model_path=tiny_eagle_draft, algorithm="EAGLE", work_dir=tmp_path
    ) as engine:
        report = engine.scheduler_report()
        info = engine.server_info()
    # The Engine side (handshake) and the scheduler side agree.
    assert info["max_total_num_tokens"] == report["scheduler"]["max_total_num_tokens"]
    assert info["speculative_algorithm"] == "EAGLE"
    _assert_weights_loaded_by_name(engine.log_path)
    tpool, dpool = _assert_spec_pools(report, "EAGLE")
    assert (dpool["head_num"], dpool["head_dim"]) == (tpool["head_num"], tpool["head_dim"])
    assert dpool["k_bytes"] == _kv_bytes(eagle_drafts.DEFAULT_EAGLE_DRAFT, dpool)
    assert tpool["k_bytes"] == _kv_bytes(llama_family.DEFAULT_TARGET, tpool)


def test_eagle3_engine_with_other_kv_geometry_builds_both_pools(
    tiny_target: Path, tiny_eagle3_draft_nnpl0: Path, tmp_path: Path
) -> None:
    with cpu_engine(
        tiny_target,
        draft_model_path=tiny_eagle3_draft_nnpl0,
        algorithm="EAGLE3",
        work_dir=tmp_path,
    ) as engine:
        report = engine.scheduler_report()
    _assert_weights_loaded_by_name(engine.log_path)
    tpool, dpool = _assert_spec_pools(report, "EAGLE3")
    shape = eagle_drafts.DEFAULT_EAGLE3_DRAFT
    assert (dpool["layer_num"], dpool["head_num"], dpool["head_dim"]) == (
        shape.layers,
        shape.kv_heads,
        shape.head_dim,
    )
    assert (dpool["head_num"], dpool["head_dim"]) != (tpool["head_num"], tpool["head_dim"])
    assert dpool["k_bytes"] == _kv_bytes(shape, dpool)
