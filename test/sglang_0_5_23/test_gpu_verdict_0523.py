"""The GPU graph verdicts fed by 0.5.23's own code, without a GPU."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from harness.gpu import broken_plugins, case_verdict, gpu_release, gpu_verdict

R0523 = gpu_release.settings("0.5.23")
DRAFT_LINE = (
    "Capture draft decode CUDA graph end. elapsed=1.20 s, mem usage={gb:.2f} GB, avail mem=7.10 GB."
)


class FakeDecodeGraphRunner:
    """Test double of 0.5.23's decode graph runner: captures nothing, owns a batch list."""

    capture_bs: Sequence[int] = (1, 2, 4, 8)

    def __init__(self, model_runner: Any) -> None:
        self.capture_bs = list(type(self).capture_bs)


def target_capture(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    *,
    avail_gb: tuple[float, float],
    bs: Sequence[int] = (1, 2, 4, 8),
) -> tuple[str, dict[str, float]]:
    """0.5.23's target verify capture: its log line and its memory phase."""
    import sglang.srt.model_executor.model_runner_components.cuda_graph_setup as setup

    runner_cls = type("FakeDecodeGraphRunner", (FakeDecodeGraphRunner,), {"capture_bs": bs})
    readings = iter(avail_gb)
    decode = SimpleNamespace(backend="full")
    monkeypatch.setattr(setup, "get_disagg", lambda: SimpleNamespace(disaggregation_mode="null"))
    monkeypatch.setattr(setup, "get_model", lambda: SimpleNamespace(model_impl="auto"))
    monkeypatch.setattr(setup, "check_cuda_graph_backend", lambda *args: False)
    monkeypatch.setattr(
        setup,
        "get_exec",
        lambda: SimpleNamespace(
            graph=SimpleNamespace(cuda_graph_config=SimpleNamespace(decode=decode))
        ),
    )
    monkeypatch.setattr(
        setup,
        "current_platform",
        SimpleNamespace(get_graph_runner_cls=lambda: runner_cls, device_name="cuda"),
    )
    monkeypatch.setattr(setup, "get_available_gpu_memory", lambda *args: next(readings))
    model_runner = SimpleNamespace(
        is_draft_worker=False,
        is_generation=True,
        device="cuda",
        gpu_id=0,
        spec_algorithm=SimpleNamespace(is_speculative=lambda: True),
        decode_num_tokens_per_req=lambda: 4,
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=setup.logger.name):
        capture = setup.capture_decode_graph(model_runner=model_runner)
    log = "\n".join(f"[2026-12-02 09:00:00] {r.getMessage()}" for r in caplog.records)
    return log, capture.memory_usage


def server_info(target: dict[str, float], draft_gb: float | None) -> dict[str, Any]:
    """``/server_info`` as 0.5.23 builds its memory usage (draft phases merged by phase)."""
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


def eagle3_launch(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    *,
    avail_gb: tuple[float, float] = (8.0, 7.39),
    draft_gb: float = 0.10,
    bs: Sequence[int] = (1, 2, 4, 8),
) -> tuple[gpu_verdict.GraphCapture, dict[str, Any]]:
    log, target = target_capture(monkeypatch, caplog, avail_gb=avail_gb, bs=bs)
    log += "\n[2026-12-02 09:00:02] " + DRAFT_LINE.format(gb=draft_gb)
    return gpu_verdict.GraphCapture.from_log(log, R0523), server_info(target, draft_gb)


def test_a_working_0_5_23_eagle3_server_passes_the_graph_verdict(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    capture, info = eagle3_launch(monkeypatch, caplog)
    assert capture.kinds == {"runner", "draft"}
    assert capture.batch_lists() == (("target verify", (1, 2, 4, 8)),)
    figures = gpu_verdict.graph_figures_gb(info)
    assert figures["target_verify"] == pytest.approx(0.61) and figures["draft_decode"] == 0.1
    # The merged payload's sum is no runner's figure (the recorded broken verdict: "0.71 GB
    # matches no captured runner [0.61]"); per runner it matches.
    assert sum(figures.values()) == pytest.approx(0.71)
    assert gpu_verdict.graph_problems(capture, info, "draft") == []


def test_a_graph_figure_that_is_no_captured_runners_fails(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The log of one capture beside the /server_info of another (0.25 GB more)."""
    capture, _ = eagle3_launch(monkeypatch, caplog)
    _, other = eagle3_launch(monkeypatch, caplog, avail_gb=(8.0, 7.14))
    (problem,) = gpu_verdict.graph_problems(capture, other, "draft")
    assert "target_verify=0.86 GB matches no captured runner" in problem


def test_a_changed_cuda_graph_batch_list_fails(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stock, stock_info = eagle3_launch(monkeypatch, caplog)
    plugin, plugin_info = eagle3_launch(monkeypatch, caplog, bs=(1, 2, 4))
    assert gpu_verdict.batch_list_problems(stock_info, stock_info, stock, stock) == []
    (problem,) = gpu_verdict.batch_list_problems(plugin_info, stock_info, plugin, stock)
    assert problem.startswith("captured batch lists differ")


@pytest.fixture
def launch_0523(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Any:
    """``launch_of(batch_list, tokens)``: an EAGLE3 launch's capture lines and /server_info,
    by 0.5.23's own capture and server-info code."""

    def launch_of(bs: Sequence[int], tokens: int) -> tuple[gpu_verdict.GraphCapture, dict]:
        capture, info = eagle3_launch(monkeypatch, caplog, bs=bs)
        # The resolved graph arguments as /server_info carries them (0.5.23's field names).
        info.update(max_total_num_tokens=tokens, cuda_graph_bs_decode=list(bs))
        return capture, info

    return launch_of


EXPECTED_0523 = {
    "duplicates not bound before sizing": ["memory", "storage_identity"],
    "draft KV priced at 0": ["memory"],
    "20 % fewer tokens than possible": ["memory", "tokens"],
    "hot-token map corrupted": ["verify_counts", "acceptance"],
    "greedy output changed": ["greedy"],
    "silently stepping aside": ["breakdown"],
    "CUDA-graph batch list changed": ["batch_lists"],
}


def test_a_working_plugins_case_passes_every_gpu_verdict_on_0_5_23(launch_0523: Any) -> None:
    working = broken_plugins.working_case(launch_0523, R0523)
    assert working.stock_fits  # 0.5.23 stock fits this draft, with the duplicates resident
    assert case_verdict.case_problems(working) == {name: [] for name in case_verdict.CHECKS}
    ratio = working.plugin.info["max_total_num_tokens"] / working.stock.info["max_total_num_tokens"]
    assert ratio > 1


def test_each_broken_plugin_fails_the_gpu_case_on_0_5_23(launch_0523: Any) -> None:
    table = broken_plugins.verdict_table(launch_0523, R0523)
    assert table == EXPECTED_0523, broken_plugins.describe(table)
