"""The GPU suite's KV-filling load generator (:mod:`harness.gpu.load`) against a CPU server."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.gpu import load
from harness.launch import processes
from harness.launch.engine import ENGINE_TEST_TIMEOUT_S, cpu_server

CAPACITY_TOKENS = 1024
CONCURRENCY = 8  # requests at once (of 160 tokens each), well under the server's own limit


def test_plan_fill_covers_the_capacity_with_the_requests_the_server_runs_at_once() -> None:
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


def test_requests_have_distinct_prompts_and_never_stop_early() -> None:
    plan = load.LoadPlan(requests=3, input_len=50, output_len=7)
    payloads = [load.request_payload(i, plan) for i in range(3)]
    assert len({tuple(p["input_ids"]) for p in payloads}) == 3
    assert all(len(p["input_ids"]) == 50 for p in payloads)
    assert payloads[0] == load.request_payload(0, plan)  # reproducible
    assert all(p["sampling_params"]["ignore_eos"] for p in payloads)


def test_unreachable_server_is_recorded_not_raised() -> None:
    port = processes.free_port()  # nothing listens there
    result = load.run_load(f"http://127.0.0.1:{port}", load.LoadPlan(2, 4, 2), timeout_s=10)
    assert len(result.failed) == 2
    assert all("URLError" in (o.error or "") for o in result.failed)
    assert result.load_samples == 0 and result.monitor_errors


def test_a_server_that_stops_answering_is_abandoned_at_the_deadline() -> None:
    import socket
    import threading
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept_and_hang() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept_and_hang, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        timing = {"timeout_s": 120, "deadline_s": 1.0, "monitor_interval_s": 0.2}
        result = load.run_load(url, load.LoadPlan(3, 4, 2), **timing)
        took = time.monotonic() - started
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()  # what the server's teardown does to the blocked workers' sockets
        listener.close()
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
