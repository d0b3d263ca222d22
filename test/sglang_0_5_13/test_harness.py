"""Self-tests of the harness both suites share: meter, tiny models, process plumbing, the GPU
suite's load generator (against a CPU server) and the live reports kept for CI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from harness.checkpoints import llama_family, llama_layout
from harness.checkpoints.eagle_drafts import TP2_EAGLE3_DRAFT, tiny_eagle3_draft
from harness.cpu_doubles import shims
from harness.gpu import load
from harness.launch import processes
from harness.launch.engine import (
    ENGINE_TEST_TIMEOUT_S,
    LaunchDidNotEnd,
    cpu_server,
    run_server_to_end,
    running_members,
)
from harness.launch.processes import format_rank_tails, rank_log_lines
from harness.reports.live_reports import KEEP_ENV, PLUGIN_REPORT_DIR_ENV, keep_live_reports


def test_meter_counts_each_storage_once_and_simulates_capacity_minus_tensors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = shims.live_cpu_tensor_bytes()
    block = torch.zeros(1 << 18, dtype=torch.float32)  # 1 MiB
    view = block[: 1 << 10]
    param = torch.nn.Parameter(block.view(512, 512), requires_grad=False)
    assert shims.live_cpu_tensor_bytes() - before == 1 << 20
    del block, view, param
    assert shims.live_cpu_tensor_bytes() == before

    monkeypatch.setattr("psutil.virtual_memory", lambda: pytest.fail("host RAM was read"))
    monkeypatch.setattr(shims, "_meter", shims.SimulatedDeviceMemory(64 << 20))
    hold = torch.zeros(4 << 20, dtype=torch.uint8)
    gib = shims.simulated_get_available_gpu_memory(lambda *a: pytest.fail("delegated"), "cpu", 0)
    used = shims.device_meter().used_bytes()
    assert gib * (1 << 30) == pytest.approx((64 << 20) - used, abs=1)
    assert used >= hold.numel()
    reading = shims.device_meter().readings[-1]
    assert reading.caller.endswith("_and_simulates_capacity_minus_tensors")
    assert shims.simulated_get_device_memory_capacity(lambda d: 0, "cpu") == 64
    # Any other device goes to the real function.
    assert shims.simulated_get_available_gpu_memory(lambda *a: 7.0, "cuda", 0) == 7.0


def test_tiny_models_are_cached_by_parameters(tmp_path: Path) -> None:
    shape = llama_layout.TinyLlamaShape(
        hidden=32, heads=2, kv_heads=1, head_dim=16, vocab=128, layers=1
    )
    no_mtp = {"cache_root": tmp_path, "num_nextn_predict_layers": 0}
    a = tiny_eagle3_draft(shape, **no_mtp)
    assert tiny_eagle3_draft(shape, **no_mtp) == a
    b = tiny_eagle3_draft(shape, cache_root=tmp_path)
    assert a != b
    config = json.loads((a / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["num_nextn_predict_layers"] == 0
    assert (config["num_key_value_heads"], config["head_dim"]) == (1, 16)
    assert "num_nextn_predict_layers" not in json.loads((b / "config.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([a.name, b.name])  # no temp dirs


def test_each_rank_can_simulate_its_own_device_capacity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(shims.CAPACITY_ENV, str(256 << 20))
    monkeypatch.setenv(shims.PER_DEVICE_CAPACITY_ENV, f"{256 << 20},{232 << 20}")
    assert shims.capacity_for_device(None) == 256 << 20
    assert shims.capacity_for_device(1) == 232 << 20
    assert shims.capacity_for_device(5) == 256 << 20  # no entry: the common capacity
    monkeypatch.setattr(shims, "_meter", shims.SimulatedDeviceMemory(256 << 20))
    meter = shims.bind_meter_to_device(1)
    assert (meter.capacity_bytes, meter.gpu_id) == (232 << 20, 1)
    meter.record(collect=False)
    with pytest.raises(RuntimeError, match="cannot rebind it to gpu 0"):
        shims.bind_meter_to_device(0)
    assert shims.bind_meter_to_device(1) is meter  # the same device again is fine


def test_pynccl_is_turned_off_on_device_cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import sglang.srt.utils as sglang_utils

    def original(group_ranks, local_rank, backend, use_pynccl=None, group_name=None):  # noqa: ANN001, ANN202
        return use_pynccl

    monkeypatch.setattr(sglang_utils, "is_cpu", lambda: True)
    assert shims.model_parallel_group_without_pynccl(original, [[0, 1]], 0, "gloo") is False
    assert shims.model_parallel_group_without_pynccl(original, [[0, 1]], 0, "gloo", True) is False
    monkeypatch.setattr(sglang_utils, "is_cpu", lambda: False)
    assert shims.model_parallel_group_without_pynccl(original, [[0, 1]], 0, "nccl") is None


def test_log_lines_are_grouped_by_rank_tag() -> None:
    log = "\n".join(
        [
            "[2026-01-01 00:00:00] launcher starts",
            "[2026-01-01 00:00:01 TP0] rank 0 loads",
            "[2026-01-01 00:00:01 DP1 TP1] rank 1 loads",
            "Traceback (most recent call last):",
            "OSError: boom",
            "[2026-01-01 00:00:02 TP0] rank 0 waits",
            # A progress bar ends without a newline; the next rank's record starts after it.
            "Loading:   0% | 0/1 [2026-01-01 00:00:03 DP1 TP1] rank 1 fails: Traceback",
            "RuntimeError: draft",
        ]
    )
    groups = rank_log_lines(log)
    assert sorted(groups) == ["DP1 TP1", "TP0", "launcher"]
    assert "OSError: boom" in groups["DP1 TP1"]  # a traceback follows its rank's line
    assert groups["TP0"][-2].endswith("rank 0 waits")
    assert groups["TP0"][-1] == "Loading:   0% | 0/1 "
    fails = "[2026-01-01 00:00:03 DP1 TP1] rank 1 fails: Traceback"
    assert groups["DP1 TP1"][-2:] == [fails, "RuntimeError: draft"]
    assert "--- last 1 lines of TP0 ---" in format_rank_tails(log, lines=1)


def test_free_port_is_one_sglang_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    from sglang.srt.server_args import ServerArgs

    def sglang_accepts(port: int) -> bool:  # 0.5.13's own --port check (it derives gRPC's)
        try:
            ServerArgs._handle_deprecated_args(SimpleNamespace(tool_call_parser=None, port=port))
        except ValueError:
            return False
        return True

    monkeypatch.delenv("SGLANG_GRPC_PORT", raising=False)
    assert not sglang_accepts(56000)  # an ephemeral port Linux hands out, that SGLang refuses
    ports = [processes.free_port() for _ in range(300)]
    assert all(sglang_accepts(p) for p in ports)
    assert max(ports) <= processes.MAX_HTTP_PORT


# A leader starting two children that ignore SIGTERM (as a busy scheduler may), then running
# on or exiting with an error (a server that died at start-up while its children live on).
_LEADER = textwrap.dedent(
    """
    import subprocess, sys, time
    child = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    pids = [subprocess.Popen([sys.executable, "-c", child]).pid for _ in range(2)]
    open(sys.argv[1] + ".tmp", "w").write(" ".join(map(str, pids)))
    import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    if sys.argv[2] == "exit":
        sys.exit(3)
    time.sleep(600)
    """
)

# In a fresh interpreter (as the GPU suite's pytest): subreaper, leader in its own group, the
# leader dies (SIGKILL or its own exit), then kill_group.
_SCENARIO = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from pathlib import Path
    from harness.launch import processes

    work, how, leader_code = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    subreaper = processes.become_subreaper()
    pid_file = work / "children"
    proc = processes.start_in_own_group(
        [sys.executable, "-c", leader_code, str(pid_file), how],
        log_path=work / "leader.log", env=os.environ, cwd=work,
    )
    deadline = time.monotonic() + 60
    while not pid_file.exists():
        assert time.monotonic() < deadline, (work / "leader.log").read_text()
        time.sleep(0.05)
    children = [int(p) for p in pid_file.read_text().split()]
    if how == "sigkill":
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    time.sleep(0.2)
    orphans = processes.group_members(proc.pid)
    adopted = all(
        int(Path(f"/proc/{c}/stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid()
        for c in children
    )
    left = processes.kill_group(proc, grace_s=1.0, reap_timeout_s=20)
    print(json.dumps({
        "subreaper": subreaper,
        "leader_rc": proc.returncode,
        "orphans_before": sorted(m.pid for m in orphans),
        "children": sorted(children),
        "adopted": adopted,
        "left": [m.pid for m in left],
        "children_in_proc": [c for c in children if Path(f"/proc/{c}").exists()],
    }))
    """
)


@pytest.mark.parametrize("how", ["sigkill", "exit"])
def test_kill_group_reaps_children_of_a_dead_leader(how: str, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SCENARIO, str(tmp_path), how, _LEADER],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["leader_rc"] == (-9 if how == "sigkill" else 3)
    assert result["subreaper"] is True
    # The leader's live children, still in its group, were adopted; none is left, nor a zombie.
    assert result["orphans_before"] == result["children"]
    assert result["adopted"] is True
    assert result["left"] == []
    assert result["children_in_proc"] == []


def test_group_members_sees_a_live_group(tmp_path: Path) -> None:
    proc = processes.start_in_own_group(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"],
        log_path=tmp_path / "sleeper.log",
        env=os.environ,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 60
        while "up" not in processes.tail(tmp_path / "sleeper.log", 5):  # output reaches the log
            assert time.monotonic() < deadline
            time.sleep(0.05)
        members = processes.group_members(proc.pid)
        assert [m.pid for m in members] == [proc.pid]
        assert "time.sleep(600)" in members[0].cmdline
    finally:
        assert processes.kill_group(proc, grace_s=1.0) == []
    assert proc.returncode == -15  # SIGTERM was enough
    assert processes.group_members(proc.pid) == []


def test_a_launch_that_outlives_its_bound_fails_with_every_ranks_tail_and_is_killed(
    tmp_path: Path,
) -> None:
    seen: list[int] = []
    with pytest.raises(LaunchDidNotEnd) as hang:
        run_server_to_end(
            llama_family.tiny_llama_target(),
            tmp_path / "run",
            bound_s=3.0,
            on_start=seen.append,
            draft_model_path=tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
            algorithm="EAGLE3",
            tp_size=2,
        )
    assert "launch still running after 3 s" in str(hang.value)
    assert "--- last 12 lines of " in str(hang.value) or "<empty log>" in str(hang.value)
    (session,) = seen
    assert running_members(session) == []


CAPACITY_TOKENS = 1024
CONCURRENCY = 8  # requests at once (of 160 tokens each), well under the server's own limit


def test_load_plan_fills_the_capacity_with_distinct_requests_that_never_stop_early() -> None:
    # A speculative server on an 80 GB GPU: 393k tokens, 48 requests at a time.
    plan = load.plan_fill(393_441, 131_000, 48)
    assert plan.requests == 48 and plan.output_len == 256
    assert 1.25 * 393_441 <= plan.total_tokens < 1.25 * 393_441 + 48
    # Prompts longer than the server accepts: shorter prompts, more requests.
    capped = load.plan_fill(393_441, 4096, 48)
    assert capped.input_len == 4096 and capped.requests > 48
    assert capped.total_tokens >= 1.25 * 393_441
    with pytest.raises(ValueError, match="must be positive"):
        load.plan_fill(0, 100, 8)
    plan = load.LoadPlan(requests=3, input_len=50, output_len=7)
    payloads = [load.request_payload(i, plan) for i in range(3)]
    assert len({tuple(p["input_ids"]) for p in payloads}) == 3
    assert all(len(p["input_ids"]) == 50 for p in payloads)
    assert payloads[0] == load.request_payload(0, plan)  # reproducible
    assert all(p["sampling_params"]["ignore_eos"] for p in payloads)


def test_unreachable_or_silent_servers_are_recorded_not_raised() -> None:
    port = processes.free_port()  # nothing listens there
    result = load.run_load(f"http://127.0.0.1:{port}", load.LoadPlan(2, 4, 2), timeout_s=10)
    assert len(result.failed) == 2
    assert all("URLError" in (o.error or "") for o in result.failed)
    assert result.load_samples == 0 and result.monitor_errors
    # A server that stops answering is abandoned at the deadline.
    # Never accepts: the kernel queues each connection, none answers.
    listener = socket.create_server(("127.0.0.1", 0), backlog=16)
    try:
        started = time.monotonic()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        timing = {"timeout_s": 120, "deadline_s": 1.0, "monitor_interval_s": 0.2}
        result = load.run_load(url, load.LoadPlan(3, 4, 2), **timing)
        took = time.monotonic() - started
    finally:
        listener.close()  # resets the blocked workers' connections, as a server's teardown does
    assert took < 30, took  # the sockets' own 120 s timeout was not waited for
    assert [o.error for o in result.outcomes] == [load.UNFINISHED] * 3


@pytest.mark.cpu_engine
@pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S)
@pytest.mark.slow  # a harness self-check of the GPU suite's load against a real CPU server
def test_load_fills_the_kv_pool_of_a_real_server(tiny_target: Path, tmp_path: Path) -> None:
    with cpu_server(
        tiny_target, plugin=False, work_dir=tmp_path, max_total_tokens=CAPACITY_TOKENS
    ) as server:
        info = server.server_info()
        plan = load.plan_fill(
            info["max_total_num_tokens"], info["max_req_input_len"], CONCURRENCY, output_len=32
        )
        result = load.run_load(server.base_url, plan, timeout_s=240, monitor_interval_s=0.05)
        healthy_after = server.healthy()
        proc = server.proc
    assert info["max_total_num_tokens"] == CAPACITY_TOKENS
    print(result.summary())
    assert result.failed == [] and result.short == [], result.summary()
    assert len(result.outcomes) == plan.requests == CONCURRENCY
    assert result.capacity_tokens == CAPACITY_TOKENS
    assert result.peak_usage >= 0.9, result.summary()
    assert healthy_after
    assert server.leftovers == [] and processes.group_members(proc.pid) == []


def test_reports_are_kept_per_launch_under_the_test_id_and_only_when_set_and_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, empty, keep = tmp_path / "specinit", tmp_path / "empty", tmp_path / "keep"
    source.mkdir()
    empty.mkdir()
    for rank in range(2):
        (source / f"memory-rank{rank}.json").write_text(json.dumps({"tp_rank": rank}))
    (source / "unrelated.json").write_text("{}")
    env = {PLUGIN_REPORT_DIR_ENV: str(source)}
    monkeypatch.delenv(KEEP_ENV, raising=False)
    assert keep_live_reports(env, "x") is None  # unset: nothing kept

    monkeypatch.setenv(KEEP_ENV, str(keep))
    assert keep_live_reports({PLUGIN_REPORT_DIR_ENV: str(empty)}, "x") is None
    assert keep_live_reports({}, "x") is None
    assert not keep.exists()

    monkeypatch.setenv("PYTEST_CURRENT_TEST", "test/cpu/test_x.py::test_y[EAGLE3 p=1] (call)")
    first, second = (keep_live_reports(env, "engine-abc") for _ in range(2))
    assert first == keep / "test_x.py_test_y_EAGLE3_p=1"
    assert second == keep / "test_x.py_test_y_EAGLE3_p=1-2"
    for folder in (first, second):
        assert sorted(os.listdir(folder)) == ["memory-rank0.json", "memory-rank1.json"]
        assert json.loads((folder / "memory-rank1.json").read_text()) == {"tp_rank": 1}
