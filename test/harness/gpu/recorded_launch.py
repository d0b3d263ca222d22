"""An EAGLE3 launch's capture lines and ``/server_info`` without a GPU, built by the installed
release's own code with test doubles for the graph runner and the free-memory meter."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from harness.gpu.broken_plugins import LaunchOf
from harness.gpu.gpu_release import ReleaseSettings
from harness.gpu.gpu_verdict import GraphCapture

BATCH = (1, 2, 4, 8)
# Free GiB before and after the target's capture: 0.61 GB of graphs.
AVAIL_GB = (8.0, 7.39)
DRAFT_GB = 0.10
# 0.5.23's draft capture line, as its f-string writes it.
DRAFT_LINE_0523 = (
    "Capture draft decode CUDA graph end. elapsed=1.20 s, mem usage={gb:.2f} GB, avail mem=7.10 GB."
)


# A launch's start-up log and /server_info.
Built = tuple[str, dict[str, Any]]


class FakeGraphRunner:
    capture_bs: Sequence[int] = BATCH

    def __init__(self, *args: Any) -> None:
        self.capture_bs = list(type(self).capture_bs)


def fake_free_memory(readings: Sequence[float]) -> Callable[..., float]:
    it = iter(readings)
    return lambda *args, **kwargs: next(it)


def _log(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(f"[2026-12-01 09:00:00] {r.getMessage()}" for r in caplog.records)


def _server_info_0513(graph_mem_usage: float, monkeypatch: pytest.MonkeyPatch) -> dict:
    import sglang.srt.managers.scheduler as scheduler

    monkeypatch.setattr(scheduler, "get_global_server_args", lambda: SimpleNamespace())
    model_runner = SimpleNamespace(weight_load_mem_usage=15.2, graph_mem_usage=graph_mem_usage)
    kvcache = SimpleNamespace(mem_usage=55.1)
    state = SimpleNamespace(max_total_num_tokens=400_000, max_running_requests=48)
    state.metrics_reporter = SimpleNamespace(last_gen_throughput=0.0)
    state.tp_worker = SimpleNamespace(model_runner=model_runner)
    state.token_to_kv_pool_allocator = SimpleNamespace(get_kvcache=lambda: kvcache)
    state.spec_algorithm = SimpleNamespace(is_none=lambda: True)
    out = scheduler.Scheduler.get_internal_state(state, None)
    return {"disable_cuda_graph": False, "internal_states": [out.internal_state]}


def _launch_0513(monkeypatch: Any, caplog: Any, draft: bool, avail_gb: Any, bs: Any) -> Built:
    import sglang.srt.model_executor.model_runner as model_runner
    import sglang.srt.speculative.eagle_worker_v2 as eagle_worker_v2

    monkeypatch.setattr(model_runner, "CudaGraphRunner", FakeGraphRunner)
    monkeypatch.setattr(model_runner, "get_available_gpu_memory", fake_free_memory(avail_gb))
    server_args = SimpleNamespace(model_impl="auto", disable_cuda_graph=False)
    runner = SimpleNamespace(is_generation=True, device="cuda", gpu_id=0, server_args=server_args)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        model_runner.ModelRunner.init_device_graphs(runner)
        if draft:
            monkeypatch.setattr(eagle_worker_v2, "EAGLEDraftCudaGraphRunner", FakeGraphRunner)
            monkeypatch.setattr(
                eagle_worker_v2, "get_available_gpu_memory", fake_free_memory([7.3, 7.1])
            )
            # Rank 0 of an initialised process group in a real server.
            monkeypatch.setattr(eagle_worker_v2, "log_info_on_rank0", lambda lg, m: lg.info(m))
            worker = SimpleNamespace(server_args=server_args, speculative_num_steps=3, gpu_id=0)
            worker.device, worker.target_worker = "cuda", SimpleNamespace(device="cuda")
            worker.draft_extend_attn_backend = None
            eagle_worker_v2.EagleDraftWorker.init_cuda_graphs(worker)
    info = _server_info_0513(runner.graph_mem_usage, monkeypatch)
    # The resolved graph arguments as /server_info carries them (ServerArgs fields).
    info.update(cuda_graph_bs=list(bs), cuda_graph_max_bs=max(bs))
    return _log(caplog), info


def _server_info_0523(target: dict[str, float], draft_gb: float | None) -> dict[str, Any]:
    from sglang.srt.managers.scheduler_components.memory_usage import build_memory_usage
    from sglang.srt.speculative.base_spec_worker import BaseSpecWorker, EagleDraftWorkerBase

    draft = None
    if draft_gb is not None:
        draft_worker = SimpleNamespace(
            draft_runners=[SimpleNamespace(graph_memory_usage={})],
            _specialized_graph_memory_usage={"draft_decode": draft_gb},
        )
        draft_worker.graph_memory_usage = EagleDraftWorkerBase.graph_memory_usage.fget(draft_worker)
        spec_worker = SimpleNamespace(draft_worker=draft_worker, _additional_graph_memory_usage={})
        draft = BaseSpecWorker.graph_memory_usage.fget(spec_worker)
    usage = build_memory_usage(
        weight_gb=15.2,
        kv_cache_gb=55.1,
        startup_available_gb=78.0,
        token_capacity=400_000,
        token_capacity_swa=None,
        target_graph_memory_usage=target,
        draft_graph_memory_usage=draft,
    )
    return {"disable_cuda_graph": False, "internal_states": [{"memory_usage": usage}]}


def _launch_0523(monkeypatch: Any, caplog: Any, draft: bool, avail_gb: Any, bs: Any) -> Built:
    import sglang.srt.model_executor.model_runner_components.cuda_graph_setup as setup

    runner_cls = type("FakeDecodeGraphRunner", (FakeGraphRunner,), {"capture_bs": bs})
    decode = SimpleNamespace(backend="full")
    monkeypatch.setattr(setup, "get_disagg", lambda: SimpleNamespace(disaggregation_mode="null"))
    monkeypatch.setattr(setup, "get_model", lambda: SimpleNamespace(model_impl="auto"))
    monkeypatch.setattr(setup, "check_cuda_graph_backend", lambda *args: False)
    graph = SimpleNamespace(cuda_graph_config=SimpleNamespace(decode=decode))
    monkeypatch.setattr(setup, "get_exec", lambda: SimpleNamespace(graph=graph))
    platform = SimpleNamespace(get_graph_runner_cls=lambda: runner_cls, device_name="cuda")
    monkeypatch.setattr(setup, "current_platform", platform)
    monkeypatch.setattr(setup, "get_available_gpu_memory", fake_free_memory(avail_gb))
    model_runner = SimpleNamespace(
        is_draft_worker=False, is_generation=True, device="cuda", gpu_id=0
    )
    model_runner.spec_algorithm = SimpleNamespace(is_speculative=lambda: True)
    model_runner.decode_num_tokens_per_req = lambda: 4
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=setup.logger.name):
        capture = setup.capture_decode_graph(model_runner=model_runner)
    log = _log(caplog)
    if draft:
        log += "\n[2026-12-01 09:00:02] " + DRAFT_LINE_0523.format(gb=DRAFT_GB)
    info = _server_info_0523(capture.memory_usage, DRAFT_GB if draft else None)
    # The resolved graph arguments as /server_info carries them (0.5.23's field names).
    info.update(cuda_graph_bs_decode=list(bs))
    return log, info


def eagle3_launch(
    release: ReleaseSettings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    *,
    draft: bool = True,
    avail_gb: Sequence[float] = AVAIL_GB,
    bs: Sequence[int] = BATCH,
) -> tuple[GraphCapture, dict[str, Any]]:
    """An EAGLE3 launch on ``release``, ``avail_gb`` free before and after the target's capture."""
    build = _launch_0513 if release.version == "0.5.13.post1" else _launch_0523
    log, info = build(monkeypatch, caplog, draft=draft, avail_gb=avail_gb, bs=bs)
    return GraphCapture.from_log(log, release), info


def no_graph_info(release: ReleaseSettings, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    if release.version == "0.5.13.post1":
        return _server_info_0513(0.0, monkeypatch)
    return _server_info_0523({}, None)


def launch_of(
    release: ReleaseSettings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> LaunchOf:

    def of(bs: Sequence[int], tokens: int) -> tuple[GraphCapture, dict[str, Any]]:
        capture, info = eagle3_launch(release, monkeypatch, caplog, bs=bs)
        info.update(max_total_num_tokens=tokens)
        return capture, info

    return of
