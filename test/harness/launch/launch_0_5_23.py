"""One tiny speculative launch of sglang 0.5.23 on device cpu, and what it left behind."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from harness.checkpoints import eagle_drafts, gemma4_mtp, llama_family, mimo_v2_mtp, tiny_configs
from harness.gpu import storage_identity
from harness.launch.engine import ENGINE_TEST_TIMEOUT_S, cpu_engine
from harness.reports.fidelity_tensors import TENSOR_REPORT_ENV
from harness.reports.report_reading import read_breakdown

# Tiny pair: target 2 layers x 2 KV heads x dim 16 (256 B/token, bf16).
EAGLE3_DRAFT_VOCAB = 16000  # a reduced draft vocabulary: EAGLE3 carries a hot-token map
STANDALONE_SHAPE = replace(llama_family.DEFAULT_TARGET, layers=1, kv_heads=1, head_dim=32)
ENGINE_TIMEOUT_S = ENGINE_TEST_TIMEOUT_S + 300  # 0.5.23 imports more at start-up


@dataclass(frozen=True)
class LaunchKind:
    """One launch configuration: target and draft checkpoints, algorithm, extra kwargs."""

    target: Callable[[], Path]
    draft: Callable[[], Path | None] = lambda: None
    algorithm: str | None = None
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    # Kwargs computed when the launch starts (a recipe's flags, parsed by SGLang's own parser).
    kwargs_fn: Callable[[], dict[str, Any]] | None = None


MULTI_LAYER_STEPS = 3

_LLAMA = llama_family.tiny_llama_target
_EAGLE3 = eagle_drafts.tiny_eagle3_draft
_MIMO = mimo_v2_mtp.tiny_mimo_v2_target
KINDS: dict[str, LaunchKind] = {
    "plain": LaunchKind(_LLAMA),
    "EAGLE": LaunchKind(_LLAMA, eagle_drafts.tiny_eagle_draft, "EAGLE"),
    "EAGLE3": LaunchKind(_LLAMA, partial(_EAGLE3, draft_vocab=EAGLE3_DRAFT_VOCAB), "EAGLE3"),
    "EAGLE3-nnpl0": LaunchKind(_LLAMA, partial(_EAGLE3, num_nextn_predict_layers=0), "EAGLE3"),
    # EAGLE3's draft with ``num_nextn_predict_layers: 1`` (stock reads its reserve from the key).
    "EAGLE3-nnpl1": LaunchKind(
        _LLAMA,
        partial(_EAGLE3, draft_vocab=EAGLE3_DRAFT_VOCAB, num_nextn_predict_layers=1),
        "EAGLE3",
    ),
    "STANDALONE": LaunchKind(_LLAMA, partial(_LLAMA, STANDALONE_SHAPE), "STANDALONE"),
    # MiMo-V2: SGLang turns multi-layer EAGLE on by itself, one MTP runner per step; the MTP
    # layers live in the target's checkpoint.
    "MTP-multi-layer": LaunchKind(
        _MIMO,
        _MIMO,
        "EAGLE",
        {"trust_remote_code": True, "num_steps": MULTI_LAYER_STEPS,
         "num_draft_tokens": MULTI_LAYER_STEPS + 1},  # fmt: skip
    ),
    # DeepSeek-V3 MTP with no draft path: the NextN layer comes from the target's checkpoint.
    "MTP-deepseek-v3": LaunchKind(
        partial(tiny_configs.tiny_checkpoint, "deepseek-v3"),
        algorithm="EAGLE",
        engine_kwargs={"trust_remote_code": True},
    ),
    # A Gemma 4 assistant: SGLang promotes EAGLE to FROZEN_KV_MTP for it. 0.5.23's Gemma 4
    # refuses torch_native attention; the Triton backend is only constructed on CPU.
    "FROZEN_KV_MTP": LaunchKind(
        gemma4_mtp.tiny_gemma4_target,
        gemma4_mtp.tiny_gemma4_assistant,
        "EAGLE",
        {"attention_backend": "triton"},
    ),
}


@dataclass
class Launch:
    """What one launch left: reports, log, draft-binding snapshots (storage_identity)."""

    report: dict[str, Any]
    memory: dict[str, Any] | None
    log: str
    identity: list[dict[str, list[dict[str, Any]]]] = field(default_factory=list)

    def runner(self, role: str) -> dict[str, Any]:
        return next(r for r in self.report["model_runners"] if r["role"] == role)

    def draft_runners(self) -> list[dict[str, Any]]:
        return [r for r in self.report["model_runners"] if r["role"] == "draft"]

    def reading(self, caller_suffix: str) -> list[dict[str, Any]]:
        return [r for r in self.report["meter"]["readings"] if r["caller"].endswith(caller_suffix)]

    @property
    def pre_load_free_bytes(self) -> int:
        readings = self.reading("measure_pre_model_load_memory")
        if not readings:
            # 0.5.20: the second of bootstrap.init_torch_distributed's three readings.
            readings = self.reading("bootstrap.init_torch_distributed")[1:]
        return readings[0]["free_bytes"]

    @property
    def free_at_profile(self) -> int:
        return self.reading("KVCacheConfigurator._profile_available_bytes")[0]["free_bytes"]

    @property
    def free_after_pools(self) -> int:
        return self.reading("KVCacheConfigurator.configure")[-1]["free_bytes"]

    @property
    def resident_at_profile(self) -> int:
        return self.pre_load_free_bytes - self.free_at_profile

    def kv_pool_bytes(self) -> int:
        pools = [r["kv_pool"] for r in self.report["model_runners"] if r["kv_pool"]]
        return sum(p["k_bytes"] + p["v_bytes"] for p in pools)


# One future per (kind, plugin): every launch starts at most once per process, whoever asks
# first (a test, or prefetch() on behalf of the tests the session collected).
_launches: dict[tuple[str, bool], Future[Launch]] = {}
_lock = threading.Lock()
# Two launches at a time: each one spends most of its start-up importing SGLang on one core.
_pool = ThreadPoolExecutor(2, thread_name_prefix="launch-0523")


def _submit(kind: str, plugin: bool, tmp_root: Path) -> Future[Launch]:
    with _lock:
        key = (kind, plugin)
        if key not in _launches:
            _launches[key] = _pool.submit(_run, kind, plugin, tmp_root)
        return _launches[key]


def prefetch(keys: list[tuple[str, bool]], tmp_root: Path) -> None:
    for kind, plugin in keys:
        _submit(kind, plugin, tmp_root)


def launch(kind: str, plugin: bool, tmp_root: Path) -> Launch:
    return _submit(kind, plugin, tmp_root).result()


def launch_overrides(spec: LaunchKind) -> dict[str, Any]:
    """The Engine kwargs on top of ``cpu_engine_kwargs``'s for ``spec`` (the benchmark's too)."""
    return {**spec.engine_kwargs, **(spec.kwargs_fn() if spec.kwargs_fn else {})}


def launch_args(kind: str) -> dict[str, Any]:
    """``cpu_engine`` / ``cpu_engine_kwargs`` keywords that start ``kind``."""
    spec = KINDS[kind]
    args = {"draft_model_path": spec.draft(), "algorithm": spec.algorithm}
    return {"model_path": spec.target(), **args, **launch_overrides(spec)}


def _run(kind: str, plugin: bool, tmp_root: Path) -> Launch:
    work = tmp_root / f"{kind}-{'on' if plugin else 'off'}"
    report_dir, identity_dir = work / "memory", work / "identity"
    for directory in (report_dir, identity_dir):
        directory.mkdir(parents=True, exist_ok=True)
    with cpu_engine(
        **launch_args(kind),
        plugin=plugin,
        work_dir=work,
        startup_timeout_s=ENGINE_TIMEOUT_S,
        # Every model tensor and KV buffer in the report; the draft's storage identity.
        extra_env={
            "SGLANG_SPECINIT_REPORT_DIR": str(report_dir),
            TENSOR_REPORT_ENV: "1",
            storage_identity.IDENTITY_ENV: "1",
            storage_identity.IDENTITY_DIR_ENV: str(identity_dir),
        },
    ) as engine:
        report = engine.scheduler_report()
    memory = read_breakdown(report_dir)
    identity = storage_identity.read_snapshots(identity_dir)
    return Launch(report, memory, engine.log_path.read_text(errors="replace"), identity)
