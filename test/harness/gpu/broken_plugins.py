"""Seven broken plugins and the working case they break; EAGLE3 launches built without a GPU."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from harness.gpu import gpu_cases, gpu_release
from harness.gpu.gpu_verdict import (
    CaseEvidence,
    GraphCapture,
    Launch,
    case_problems,
    sglang_meta_info,
)
from harness.reports import device_probe

GIB, MIB = 1 << 30, 1 << 20
CELL_TARGET, CELL_DRAFT = 128 << 10, 4 << 10  # Llama-3.1-8B's KV per token, an EAGLE3 draft's
DUPLICATES = GIB  # the draft's embed/lm_head copy (Llama-3.1-8B's embed)
NUM_DRAFT_TOKENS = 4
BATCH = (1, 2, 4, 8)
# ``launch_of(bs=...)``: a launch's capture lines and /server_info, by the release's own code.
LaunchOf = Callable[..., tuple[GraphCapture, dict[str, Any]]]


def recorded_probe(
    *,
    stray_bytes: int = 0,
    stray_freed_before_pools: bool = False,
    page_size: int = 1,
    pre: int = 80 * GIB,
    f: float = 0.9,
    draft_priced: bool = True,
    token_share: float = 1.0,
) -> list[dict[str, Any]]:
    """One scheduler's probe records of an EAGLE3 launch, ``stray_bytes`` live at sizing."""
    target_w, draft_w, residue = 15 * GIB, int(0.8 * GIB), int(0.6 * GIB)
    price = CELL_TARGET + (CELL_DRAFT if draft_priced else 0)
    held = target_w + draft_w + stray_bytes
    free_at_sizing = pre - held - residue
    budget = int(f * pre)
    kv_budget = budget - (pre - free_at_sizing) - page_size * price  # + the padding page
    tokens = int(kv_budget // price * token_share) // page_size * page_size
    kv_t, kv_d = (tokens + page_size) * CELL_TARGET, (tokens + page_size) * CELL_DRAFT
    tables = 300 * MIB
    free, allocated = free_at_sizing, held
    if stray_freed_before_pools:
        free, allocated = free + stray_bytes, allocated - stray_bytes
    who = {"tp_rank": 0, "draft_model_idx": None}

    def reading(free_bytes: int, allocated_bytes: int) -> dict[str, int]:
        return {
            "free_bytes": free_bytes,
            "torch_allocated_bytes": allocated_bytes,
            "torch_reserved_bytes": allocated_bytes,
        }

    pool = {"method": device_probe.POOL_METHOD, "page_size": page_size, "kv_tokens": tokens}
    return [
        {"event": "pre_load", "is_draft": False, **who, "free_bytes": pre, "seq": 0},
        {"event": "enter", "is_draft": False, **who, **pool, "seq": 1, "weight_bytes": target_w}
        | reading(free_at_sizing, held),
        {"event": "exit", "is_draft": False, **who, **pool, "seq": 2, "kv_bytes": kv_t}
        | {"table_bytes": tables, "mem_fraction_static": f}
        | reading(free - kv_t - tables, allocated + kv_t + tables),
        {"event": "enter", "is_draft": True, **who, **pool, "seq": 3, "weight_bytes": draft_w}
        | reading(free - kv_t - tables, allocated + kv_t + tables),
        {"event": "exit", "is_draft": True, **who, **pool, "seq": 4, "kv_bytes": kv_d}
        | {"table_bytes": 0, "mem_fraction_static": f}
        | reading(free - kv_t - tables - kv_d, allocated + kv_t + tables + kv_d),
    ]


def plugin_breakdown(
    usage: device_probe.UsageAfterPools, records: list[dict[str, Any]], *, draft_priced: bool = True
) -> dict[str, Any]:
    exits = [r for r in records if r["event"] == "exit"]
    return {
        "tp_rank": 0,
        "tokens": exits[0]["kv_tokens"],
        "draft_request_bytes": 0,
        "draft_fixed_pool_bytes": 0,
        "page_size": exits[0]["page_size"],
        "pre_load_free_bytes": usage.pre_load_free_bytes,
        "budget_bytes": usage.budget_bytes,
        "target_kv_pool_bytes": exits[0]["kv_bytes"],
        "allocated_target_kv_pool_bytes": exits[0]["kv_bytes"],
        "target_kv_bytes_per_token": CELL_TARGET,
        "draft_kv_pool_bytes": exits[1]["kv_bytes"] if draft_priced else 0,
        "allocated_draft_kv_pool_bytes": exits[1]["kv_bytes"],
        "draft_kv_bytes_per_token": CELL_DRAFT if draft_priced else 0,
        "cuda_free_bytes_after_pools": exits[1]["free_bytes"],
        "cuda_free_bytes_after_init": exits[1]["free_bytes"] - GIB,
    }


def response(ids: list[int], verify_ct: int, correct: int) -> dict[str, Any]:
    """One greedy ``/generate`` answer, ``meta_info`` by the release's TokenizerManager."""
    meta = sglang_meta_info(len(ids), verify_ct, correct, NUM_DRAFT_TOKENS)
    return {"text": " ".join(map(str, ids)), "output_ids": ids, "meta_info": meta}


def responses(
    correct: int = 56, *, verify_ct: int = 40, changed_at: int | None = None
) -> list[dict]:
    """One server's answers (96 tokens each); ``changed_at``: the second one differs there."""
    ids = [[1000 + 7 * i + t for t in range(96)] for i, _ in enumerate(gpu_cases.PROMPTS)]
    if changed_at is not None:
        ids[1][changed_at] += 1
    return [response(one, verify_ct, correct) for one in ids]


SHARED = {"draft0/lm_head.weight": "lm_head.weight", "draft0/embed_tokens.weight": "embed"}


def identity(*, bound_at_pool: bool = True) -> list[dict[str, list[dict[str, Any]]]]:
    after = {"point": "after_init", "tp_rank": 0, "drafts": 1, "shared": SHARED, "own": []}
    pool = dict(after, point="pool")
    if not bound_at_pool:
        pool.update(shared={}, own=sorted(SHARED))
    return [{"pool": [pool], "after_init": [after]}]


def _launch(
    launch_of: LaunchOf,
    records: list[dict[str, Any]],
    *,
    plugin: bool = False,
    bs: Sequence[int] = BATCH,
    draft_priced: bool = True,
    **answers: Any,
) -> Launch:
    usage = device_probe.usage_after_pools(records)
    capture, info = launch_of(bs=bs)
    info["max_total_num_tokens"] = records[2]["kv_tokens"]
    breakdowns = [plugin_breakdown(usage, records, draft_priced=draft_priced)] if plugin else []
    return Launch(info, responses(**answers), capture, [usage], breakdowns)


def working_case(launch_of: LaunchOf, release: gpu_release.ReleaseSettings) -> CaseEvidence:
    # Stock on the same launch, duplicates resident (0.5.13.x: its draft's KV unpriced).
    priced = not release.stock_sizes_before_the_draft
    stock = _launch(launch_of, recorded_probe(stray_bytes=DUPLICATES, draft_priced=priced))
    stock.control = responses()
    return CaseEvidence(
        prompts=gpu_cases.PROMPTS,
        tp=1,
        expect_draft="draft",
        plugin=_launch(launch_of, recorded_probe(), plugin=True),
        stock=stock,
        identity=identity(),
        stock_after_init=identity()[0]["after_init"][0],
    )


def broken_case(
    e: CaseEvidence,
    launch_of: LaunchOf,
    *,
    probe: dict[str, Any] | None = None,
    bound_at_pool: bool = True,
    step_aside: bool = False,
    **launch: Any,
) -> CaseEvidence:
    """The working case with a plugin-on launch of ``recorded_probe(**probe)``, or stock's."""
    if step_aside:
        return dataclasses.replace(e, plugin=dataclasses.replace(e.stock, control=None))
    plugin = _launch(launch_of, recorded_probe(**(probe or {})), plugin=True, **launch)
    return dataclasses.replace(e, plugin=plugin, identity=identity(bound_at_pool=bound_at_pool))


# Each broken plugin: its ``broken_case`` keywords, and every check of the case it fails
# ("tokens" only on a release whose stock fits the budget: there the plugin must serve more).
BROKEN: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    # The duplicate embed/lm_head resident while the target pool is sized (stock's binding).
    "duplicates not bound before sizing": (
        {"probe": {"stray_bytes": DUPLICATES, "stray_freed_before_pools": True}}
        | {"bound_at_pool": False},
        ("memory", "storage_identity"),
    ),
    "draft KV priced at 0": (
        {"probe": {"draft_priced": False}, "draft_priced": False},
        ("memory",),
    ),
    "20 % fewer tokens than possible": ({"probe": {"token_share": 0.8}}, ("memory", "tokens")),
    # The draft proposes from the wrong vocabulary: the same greedy tokens, far more verify steps.
    "hot-token map corrupted": ({"verify_ct": 90, "correct": 6}, ("verify_counts", "acceptance")),
    "greedy output changed": ({"changed_at": 20}, ("greedy",)),
    # Registered, then nothing: stock's sizing, no breakdown, no warning.
    "silently stepping aside": ({"step_aside": True}, ("breakdown",)),
    "CUDA-graph batch list changed": ({"bs": BATCH[:-1]}, ("batch_lists",)),
}


def verdict_table(
    launch_of: LaunchOf, release: gpu_release.ReleaseSettings
) -> dict[str, list[str]]:
    working = working_case(launch_of, release)
    cases = {name: broken_case(working, launch_of, **how) for name, (how, _) in BROKEN.items()}
    failed = {name: case_problems(case) for name, case in cases.items()}
    return {name: [check for check, found in p.items() if found] for name, p in failed.items()}


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


def _launch_0513(monkeypatch: Any, caplog: Any, draft: bool, avail_gb: Any, bs: Any) -> Built:
    import sglang.srt.managers.scheduler as scheduler
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
    # /server_info's internal state, by the release's Scheduler.
    monkeypatch.setattr(scheduler, "get_global_server_args", lambda: SimpleNamespace())
    loaded = SimpleNamespace(weight_load_mem_usage=15.2, graph_mem_usage=runner.graph_mem_usage)
    kvcache = SimpleNamespace(mem_usage=55.1)
    state = SimpleNamespace(max_total_num_tokens=400_000, max_running_requests=48)
    state.metrics_reporter = SimpleNamespace(last_gen_throughput=0.0)
    state.tp_worker = SimpleNamespace(model_runner=loaded)
    state.token_to_kv_pool_allocator = SimpleNamespace(get_kvcache=lambda: kvcache)
    state.spec_algorithm = SimpleNamespace(is_none=lambda: True)
    out = scheduler.Scheduler.get_internal_state(state, None)
    info = {"disable_cuda_graph": False, "internal_states": [out.internal_state]}
    # The resolved graph arguments as /server_info carries them (ServerArgs fields).
    info.update(cuda_graph_bs=list(bs), cuda_graph_max_bs=max(bs))
    return _log(caplog), info


def _launch_0523(monkeypatch: Any, caplog: Any, draft: bool, avail_gb: Any, bs: Any) -> Built:
    import sglang.srt.model_executor.model_runner_components.cuda_graph_setup as setup
    from sglang.srt.managers.scheduler_components.memory_usage import build_memory_usage
    from sglang.srt.speculative.base_spec_worker import BaseSpecWorker, EagleDraftWorkerBase

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
    log, draft_usage = _log(caplog), None
    if draft:
        log += "\n[2026-12-01 09:00:02] " + DRAFT_LINE_0523.format(gb=DRAFT_GB)
        draft_worker = SimpleNamespace(
            draft_runners=[SimpleNamespace(graph_memory_usage={})],
            _specialized_graph_memory_usage={"draft_decode": DRAFT_GB},
        )
        draft_worker.graph_memory_usage = EagleDraftWorkerBase.graph_memory_usage.fget(draft_worker)
        spec_worker = SimpleNamespace(draft_worker=draft_worker, _additional_graph_memory_usage={})
        draft_usage = BaseSpecWorker.graph_memory_usage.fget(spec_worker)
    usage = build_memory_usage(
        weight_gb=15.2,
        kv_cache_gb=55.1,
        startup_available_gb=78.0,
        token_capacity=400_000,
        token_capacity_swa=None,
        target_graph_memory_usage=capture.memory_usage,
        draft_graph_memory_usage=draft_usage,
    )
    info = {"disable_cuda_graph": False, "internal_states": [{"memory_usage": usage}]}
    # The resolved graph arguments as /server_info carries them (0.5.23's field names).
    info.update(cuda_graph_bs_decode=list(bs))
    return log, info


def launch_of(
    release: gpu_release.ReleaseSettings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> LaunchOf:
    """``of(draft=, avail_gb=, bs=)``: an EAGLE3 launch, ``avail_gb`` free around its capture."""
    build = _launch_0513 if release.version == "0.5.13.post1" else _launch_0523

    def of(
        *, draft: bool = True, avail_gb: Sequence[float] = AVAIL_GB, bs: Sequence[int] = BATCH
    ) -> tuple[GraphCapture, dict[str, Any]]:
        log, info = build(monkeypatch, caplog, draft=draft, avail_gb=avail_gb, bs=bs)
        return GraphCapture.from_log(log, release), info

    return of
