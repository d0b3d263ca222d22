"""The GPU suite's verdicts on recorded inputs, without a GPU (:mod:`harness.gpu.gpu_verdict`)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from harness.gpu import device_memory, gpu_cases, gpu_preflight, gpu_verdict, load
from harness.gpu.broken_plugins import plugin_breakdown, recorded_probe, response, responses
from harness.gpu.gpu_verdict import DraftStats, sglang_meta_info, summed
from harness.launch.server_process import RunFiles, ServerHandle
from harness.reports import device_probe

GIB, MIB = 1 << 30, 1 << 20
PROMPTS = gpu_cases.PROMPTS


def test_drafts_read_from_sglangs_keys_pass_noise_and_fail_a_draft_that_got_worse() -> None:
    stats = DraftStats.from_meta_info(sglang_meta_info(64, 20, 43, 4))
    assert stats == DraftStats(64, verify_steps=20, correct_drafts=43, proposed_drafts=60)
    assert stats.accept_rate == pytest.approx(43 / 60)
    # 64 tokens, no draft ever accepted: one prefill token + one bonus token per verify step.
    meta = sglang_meta_info(64, 63, 0, 4)
    assert meta["spec_accept_length"] > 1.0  # what the old check asserted: passes anyway
    assert DraftStats.from_meta_info(meta).correct_drafts == 0
    total = summed([{"meta_info": sglang_meta_info(64, 20, 43, 4)}, {"meta_info": meta}])
    assert total == DraftStats(128, 83, 43, 60 + 189)
    meta = sglang_meta_info(1, 0, 0, 4)
    assert "spec_verify_ct" not in meta  # SGLang leaves the keys out
    with pytest.raises(ValueError, match="no speculative verify step"):
        DraftStats.from_meta_info(meta)
    answers = responses(55)
    stock = summed(answers)
    # One draft token in a hundred more or fewer per prompt: kernel noise, inside the bound.
    assert gpu_verdict.acceptance_problems(summed(responses(54)), stock) == []
    (problem,) = gpu_verdict.acceptance_problems(summed(responses(0)), stock)
    assert "accepted no draft token" in problem
    (problem,) = gpu_verdict.acceptance_problems(stock, summed(responses(0)))
    assert problem.startswith("stock accepted no draft token")
    # The bound shrinks with more proposed drafts; without any it is 0.
    one = DraftStats(96, 40, 55, 120)
    four = DraftStats(4 * 96, 4 * 40, 4 * 55, 4 * 120)
    assert gpu_verdict.acceptance_bound(four, four) == pytest.approx(
        gpu_verdict.acceptance_bound(one, one) / 2
    )
    assert gpu_verdict.acceptance_bound(DraftStats(1, 0, 0, 0), one) == 0.0
    # Verify counts must equal stock's per prompt, within stock's own spread: two verify steps
    # more on one prompt, which the aggregate binomial bound cannot see, fail.
    worse = responses(55)
    worse[2] = response(worse[2]["output_ids"], 42, 53)
    assert gpu_verdict.acceptance_problems(summed(worse), stock) == []
    (problem,) = gpu_verdict.greedy_verdict(PROMPTS, worse, answers, answers).verify_counts
    assert repr(PROMPTS[2]) in problem and "42 verify steps with the plugin, 40 stock" in problem
    control = responses(55)
    control[2] = response(control[2]["output_ids"], 41, 54)  # stock moved by one itself
    # The plugin one step off, as far as stock's repeat: inside the spread; two steps: not.
    assert gpu_verdict.greedy_verdict(PROMPTS, control, answers, control).verify_counts == []
    assert gpu_verdict.greedy_verdict(PROMPTS, worse, answers, control).verify_counts


def with_margins(run: list[dict], margins: list[float]) -> list[dict]:
    """``run`` with ``output_top_logprobs`` leading by each margin, by SGLang's own code."""
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    vals, idxs = [[-0.1, -0.1 - m] for m in margins], [[7, 8] for _ in margins]
    manager = SimpleNamespace()
    manager.detokenize_logprob_tokens = lambda v, i, text: (
        TokenizerManager.detokenize_logprob_tokens(manager, v, i, text)
    )
    tops = TokenizerManager.detokenize_top_logprobs_tokens(manager, vals, idxs, False)
    tops = json.loads(json.dumps(tops))
    return [{**r, "meta_info": {**r["meta_info"], "output_top_logprobs": tops}} for r in run]


def test_greedy_verdict_fails_a_changed_token_where_stocks_choice_was_clear() -> None:
    stock = responses(55)
    (problem,) = gpu_verdict.greedy_verdict(PROMPTS, responses(55, changed_at=17), stock).problems
    assert repr(PROMPTS[1]) in problem and "at output token 17" in problem
    # Without logprobs (0.5.13.post1's DFLASH) a difference is not excused.
    assert "stock margin n/a" in problem
    short = responses(55)
    short[0] = response(short[0]["output_ids"][:50], 20, 30)
    (problem,) = gpu_verdict.greedy_verdict(PROMPTS, short, stock).problems
    assert "at output token 50 (50 vs 96 tokens;" in problem
    assert gpu_verdict.greedy_verdict(PROMPTS, short[:3], stock).problems
    # Stock's top-two margin at the changed token: clear, or within a hundredth of a nat
    # (rounding decides: recorded as a tie, not failed).
    for margin, fails in ((2.0, True), (0.01, False)):
        margins = [2.0] * 96
        margins[17] = margin
        stock = with_margins(responses(55), margins)
        changed = with_margins(responses(55, changed_at=17), margins)
        verdict = gpu_verdict.greedy_verdict(PROMPTS, changed, stock, stock)
        found = (verdict.problems, verdict.ties)
        (line,), tied = found if fails else found[::-1]
        assert "at output token 17" in line and f"stock margin {margin:.3f}" in line
        assert tied == [] and verdict.control == []
    # A stock control that differs at a clear margin fails the case.
    clear = with_margins(responses(55), [2.0] * 96)
    control = with_margins(responses(55, changed_at=40), [2.0] * 96)
    verdict = gpu_verdict.greedy_verdict(PROMPTS, clear, clear, control)
    (problem,) = verdict.problems
    assert problem.startswith("stock is not reproducible at a clear margin")
    assert len(verdict.control) == 1


@pytest.mark.parametrize("freed_later", [False, True])
@pytest.mark.parametrize("stray_gib", [1.0, 0.5])
def test_fill_floor_fails_a_duplicate_embed_lm_head_the_old_floor_let_pass(
    stray_gib: float, freed_later: bool
) -> None:
    usage = device_probe.usage_after_pools(
        recorded_probe(stray_bytes=int(stray_gib * GIB), stray_freed_before_pools=freed_later)
    )
    assert usage.counted_bytes >= 0.98 * usage.budget_bytes  # the old check: passes anyway
    (problem,) = gpu_verdict.fill_problems(usage, {})  # a breakdown without plugin reserves
    assert "hold neither weights, KV nor the non-tensor residue" in problem
    assert usage.fill_shortfall_bytes >= stray_gib * GIB


@pytest.mark.parametrize("page_size", [1, 64])
def test_memory_verdict_of_one_rank_that_fills_its_budget(page_size: int) -> None:
    records = recorded_probe(page_size=page_size)
    usage = device_probe.usage_after_pools(records)
    assert usage.page_bytes == page_size * ((128 << 10) + (4 << 10))
    assert 0 <= usage.fill_shortfall_bytes < usage.page_bytes
    sound = plugin_breakdown(usage, records)  # within the budget, and fills it
    assert gpu_verdict.memory_problems(sound, usage, fill=True) == []
    short = {**sound, "allocated_draft_kv_pool_bytes": sound["draft_kv_pool_bytes"] // 2}
    (problem,) = gpu_verdict.memory_problems(short, usage, fill=True)
    assert problem.startswith("draft KV pool: allocated")
    stray = device_probe.usage_after_pools(recorded_probe(stray_bytes=GIB))
    assert gpu_verdict.memory_problems(plugin_breakdown(stray, records), stray, fill=False) == []
    # Without torch counters (not a CUDA run) the fill cannot be checked: that fails.
    bare = [{k: v for k, v in r.items() if not k.startswith("torch_")} for r in records]
    usage = device_probe.usage_after_pools(bare)
    assert usage.fill_shortfall_bytes is None
    assert gpu_verdict.fill_problems(usage, {})


def test_oom_is_read_only_after_the_server_became_healthy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "gpu"))
    from gpu_server import GpuServer

    files = RunFiles.make(tmp_path, "server")
    startup = "[09:00:01] Capture cuda graph end. (a CUDA out of memory here is start-up's)\n"
    files.log_path.write_text(startup)
    server = GpuServer(ServerHandle(proc=None, files=files, port=0, argv=[]), len(startup))
    with files.log_path.open("a") as log:
        log.write("[09:01:00] Decode batch. #running-req: 48\n")
    assert gpu_verdict.oom_lines(server.startup_log()) != []
    assert gpu_verdict.oom_lines(server.log_after_ready()) == []
    with files.log_path.open("a") as log:
        log.write("[09:02:00] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate\n")
    assert len(gpu_verdict.oom_lines(server.log_after_ready())) == 1
    assert server.port == 0  # everything else is the ServerHandle's


BANNER = """Tue Dec  1 09:00:00 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI {0}             Driver Version: {0}     CUDA Version: {1}     |
|-----------------------------------------+------------------------+----------------------+
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |
"""
OK = "GPU preflight: ok (driver 580.65.06, CUDA 13.0"
NO_CUDA = "| NVIDIA-SMI 580.82.07    Driver Version: 580.82.07 |"


@pytest.mark.parametrize(
    ("smi", "libc", "says"),
    [
        (BANNER.format("580.65.06", "13.0"), "glibc 2.35", OK),
        (BANNER.format("550.54.15", "12.4"), "glibc 2.35", "driver 550.54.15 supports CUDA 12.4"),
        (None, "glibc 2.35", "no NVIDIA driver"),
        (BANNER.format("580.65.06", "13.0"), "glibc 2.31", "glibc 2.31 is older than 2.34"),
        (BANNER.format("580.65.06", "13.0"), None, "glibc unknown"),
        # No CUDA version in the banner: the driver branch decides.
        (NO_CUDA, "glibc 2.39", "GPU preflight: ok (driver 580.82.07"),
        (NO_CUDA.replace("580", "575"), "glibc 2.39", "driver 575.82.07 supports CUDA unknown"),
    ],
)
def test_preflight_passes_cuda_13_on_glibc_2_35_and_says_in_one_line_what_is_missing(
    smi: str | None, libc: str | None, says: str
) -> None:
    code, line = gpu_preflight.verdict(smi, libc)
    ok = says.startswith("GPU preflight: ok")
    assert code == (not ok) and "\n" not in line
    failed = "GPU preflight: FAILED, sglang 0.5.13.post1 needs"
    assert line.startswith(says if ok else failed) and says in line


def test_memory_watch_keeps_each_phases_peak_and_free_memory_after_capture(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("[09:00:00] Load weight end. mem usage=15.0 GB\n")
    used = {0: 20 * GIB, 1: 21 * GIB}
    watch = device_memory.MemoryWatch(lambda i: (used[i], 80 * GIB), [0, 1], log)
    watch.sample()
    used.update({0: 70 * GIB, 1: 69 * GIB})
    watch.sample()
    with log.open("a") as f:  # 0.5.23's line; 0.5.13.post1 writes "Capture cuda graph begin."
        f.write("[09:01:00] Capture target verify CUDA graph begin. backend=full\n")
    used.update({0: 72 * GIB, 1: 71 * GIB})
    watch.sample()
    used.update({0: 71 * GIB, 1: 70 * GIB})
    report = watch.stop()
    assert report["peak_used_bytes"] == {
        "init": {0: 70 * GIB, 1: 69 * GIB},
        "capture": {0: 72 * GIB, 1: 71 * GIB},
    }
    assert report["free_after_capture_bytes"] == {0: 9 * GIB, 1: 10 * GIB}
    assert watch.stop() == report  # a second stop only reports


def fake_reader(script: dict[int, list[int]], holders: dict | None = None) -> Any:
    """NVML while a dead server's context is torn down: each read returns the device's next
    scripted ``used`` value (the last one repeats), and is counted."""
    reads = dict.fromkeys(script, 0)

    def used_bytes(i: int) -> int:
        reads[i] += 1
        return script[i][min(reads[i], len(script[i])) - 1]

    return SimpleNamespace(used_bytes=used_bytes, holder_pids=(holders or {}).get, reads=reads)


def test_a_case_waits_on_its_own_devices_until_each_is_back_near_its_baseline() -> None:
    uuids = {"GPU-aaaa-1111": 0, "GPU-bbbb-2222": 1, "GPU-cccc-3333": 2}

    def devices(tp: int, count: int, visible: str | None = None) -> list[int]:
        env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
        return device_memory.devices_for_case(tp, count, uuids, env=env)

    assert devices(1, 8) == [0]
    assert devices(2, 8, "5,3,1") == [5, 3]
    assert devices(2, 3, "GPU-cccc,GPU-aaaa-1111") == [2, 0]
    # An id NVML does not list (a MIG instance): every device is watched.
    assert devices(1, 3, "MIG-1") == [0, 1, 2]
    assert devices(1, 3, "") == []
    baselines = {0: GIB, 1: 2 * GIB}
    # Device 0 drains in three polls, device 1 is already clean.
    reader = fake_reader({0: [70 * GIB, 30 * GIB, GIB + 100 * MIB], 1: [2 * GIB]})
    sleeps: list[float] = []
    used = device_memory.wait_until_released(
        reader, baselines, tolerance_bytes=512 * MIB, timeout_s=60, poll_s=2, sleep=sleeps.append
    )
    assert sleeps == [2, 2]
    assert used == {0: GIB + 100 * MIB, 1: 2 * GIB}
    assert reader.reads == {0: 3, 1: 3}
    # Past the bound it gives up, naming the holders.
    reader = fake_reader({0: [60 * GIB]}, holders={0: [4242]})
    named = r"device 0: .*\(\+60416 MiB .*pids \[4242\]"
    with pytest.raises(device_memory.DeviceMemoryNotReleased, match=named):
        device_memory.wait_until_released(
            reader, {0: GIB}, tolerance_bytes=512 * MIB, timeout_s=0.3, poll_s=0.05
        )


def test_the_short_load_gives_throughput_and_accept_length() -> None:
    outcomes = [
        load.RequestOutcome(i, completion_tokens=128, seconds=4.0, verify_steps=40)
        for i in range(16)
    ]
    result = load.LoadResult(load.SHORT_LOAD, outcomes, seconds=8.0)
    assert result.output_throughput == 16 * 128 / 8.0
    assert result.accept_length == 128 / 40
    not_speculative = load.LoadResult(load.SHORT_LOAD, [load.RequestOutcome(0, 128)], seconds=1)
    assert not_speculative.accept_length is None
