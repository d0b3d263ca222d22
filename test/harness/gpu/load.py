"""Fill a running SGLang server's KV cache with concurrent requests and record what happened."""

from __future__ import annotations

import json
import math
import random
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

# Token ids drawn for inputs: below every real vocabulary's special tokens (Llama 3: >= 128000,
# Qwen: >= 151643) and inside the 32000-entry vocabulary of the CPU suite's tiny models.
INPUT_TOKEN_RANGE = (1000, 30000)


@dataclass(frozen=True)
class LoadPlan:
    requests: int
    input_len: int
    output_len: int

    @property
    def total_tokens(self) -> int:
        return self.requests * (self.input_len + self.output_len)


def plan_fill(
    capacity_tokens: int,
    max_req_input_len: int,
    concurrency: int,
    *,
    output_len: int = 256,
    overfill: float = 1.25,
) -> LoadPlan:
    """At least ``concurrency`` requests adding up to ``overfill x capacity_tokens``."""
    if capacity_tokens <= 0 or concurrency <= 0:
        got = f"{capacity_tokens}, {concurrency}"
        raise ValueError(f"capacity_tokens and concurrency must be positive, got {got}")
    wanted = math.ceil(overfill * capacity_tokens)
    input_len = max(1, min(math.ceil(wanted / concurrency) - output_len, max_req_input_len))
    requests = max(concurrency, math.ceil(wanted / (input_len + output_len)))
    return LoadPlan(requests=requests, input_len=input_len, output_len=output_len)


def request_payload(index: int, plan: LoadPlan) -> dict[str, Any]:
    rng = random.Random(index)
    low, high = INPUT_TOKEN_RANGE
    sampling = {"temperature": 0, "max_new_tokens": plan.output_len, "ignore_eos": True}
    ids = [rng.randrange(low, high) for _ in range(plan.input_len)]
    return {"input_ids": ids, "sampling_params": sampling}


@dataclass
class RequestOutcome:
    index: int
    completion_tokens: int = 0
    error: str | None = None
    seconds: float = 0.0
    verify_steps: int = 0  # spec_verify_ct (0: not a speculative server)


@dataclass
class LoadResult:
    plan: LoadPlan
    outcomes: list[RequestOutcome]
    capacity_tokens: int | None = None
    peak_used_tokens: int = 0
    load_samples: int = 0
    monitor_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[RequestOutcome]:
        return [o for o in self.outcomes if o.error is not None]

    @property
    def short(self) -> list[RequestOutcome]:
        asked = self.plan.output_len
        return [o for o in self.outcomes if o.error is None and o.completion_tokens != asked]

    @property
    def peak_usage(self) -> float:
        return self.peak_used_tokens / self.capacity_tokens if self.capacity_tokens else 0.0

    @property
    def output_throughput(self) -> float:
        tokens = sum(o.completion_tokens for o in self.outcomes if o.error is None)
        return tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def accept_length(self) -> float | None:
        """Output tokens per verify step (None without speculative counters)."""
        done = [o for o in self.outcomes if o.error is None]
        steps = sum(o.verify_steps for o in done)
        return sum(o.completion_tokens for o in done) / steps if steps else None

    def summary(self) -> str:
        errors = sorted({o.error for o in self.failed if o.error})[:5]
        return (
            f"{len(self.outcomes)} requests of {self.plan.input_len}+{self.plan.output_len} "
            f"tokens in {self.seconds:.1f} s: {len(self.failed)} failed, {len(self.short)} short; "
            f"peak KV use {self.peak_used_tokens}/{self.capacity_tokens} tokens "
            f"({self.peak_usage:.1%}, {self.load_samples} samples); errors: {errors}"
        )


def _send(base_url: str, index: int, plan: LoadPlan, timeout_s: float) -> RequestOutcome:
    started = time.monotonic()
    outcome = RequestOutcome(index)
    data = json.dumps(request_payload(index, plan)).encode()
    headers = {"Content-Type": "application/json"}
    try:
        req = urllib.request.Request(base_url + "/generate", data=data, headers=headers)
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            meta = json.loads(resp.read())["meta_info"]
        outcome.completion_tokens = int(meta["completion_tokens"])
        outcome.verify_steps = int(meta.get("spec_verify_ct") or 0)
    except urllib.error.HTTPError as e:
        outcome.error = f"HTTP {e.code}: {e.read()[:300].decode(errors='replace')}"
    except (OSError, ValueError, KeyError) as e:
        outcome.error = f"{type(e).__name__}: {e}"
    outcome.seconds = time.monotonic() - started
    return outcome


def _monitor(base_url: str, result: LoadResult, stop: threading.Event, interval_s: float) -> None:
    while not stop.is_set():
        try:
            with urllib.request.urlopen(base_url + "/v1/loads?include=core", timeout=10) as r:
                loads = json.loads(r.read())["loads"]
            result.peak_used_tokens = max(
                result.peak_used_tokens, max(int(x["num_used_tokens"]) for x in loads)
            )
            result.capacity_tokens = int(loads[0]["max_total_num_tokens"])
            result.load_samples += 1
        except (OSError, ValueError, KeyError) as e:
            result.monitor_errors.append(f"{type(e).__name__}: {e}")
        stop.wait(interval_s)


# Per request: 256 greedy tokens of a full pool on one GPU take well under a minute; a request
# still open after this is stuck, and the test should say so rather than wait.
REQUEST_TIMEOUT_S = 600.0
# The whole load after the last request was sent: past it, what is still open is recorded as
# unfinished and abandoned, so the server is torn down at once.
DEADLINE_S = 900.0
UNFINISHED = "unfinished at the load's deadline"


def run_load(
    base_url: str,
    plan: LoadPlan,
    *,
    timeout_s: float = REQUEST_TIMEOUT_S,
    deadline_s: float = DEADLINE_S,
    monitor_interval_s: float = 0.5,
) -> LoadResult:
    """Send every request of ``plan`` at once; wait up to ``deadline_s`` (never raises)."""
    result = LoadResult(plan=plan, outcomes=[])
    stop = threading.Event()
    args = (base_url, result, stop, monitor_interval_s)
    monitor = threading.Thread(target=_monitor, args=args, daemon=True)
    started = time.monotonic()
    monitor.start()
    pool = ThreadPoolExecutor(max_workers=plan.requests, thread_name_prefix="load")
    try:
        futures = [pool.submit(_send, base_url, i, plan, timeout_s) for i in range(plan.requests)]
        wait(futures, timeout=deadline_s)
        result.outcomes = [
            f.result() if f.done() else RequestOutcome(i, error=UNFINISHED)
            for i, f in enumerate(futures)
        ]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        stop.set()
        monitor.join(timeout=5)
    result.seconds = time.monotonic() - started
    return result


# The same short load on the plugin-on and the stock server of a case: 16 requests of 128 + 128
# tokens, 8 at a time is SGLang's own batch; bounded so that it cannot eat the case's time.
SHORT_LOAD = LoadPlan(requests=16, input_len=128, output_len=128)
SHORT_LOAD_DEADLINE_S = 120.0


def short_load(base_url: str, *, deadline_s: float = SHORT_LOAD_DEADLINE_S) -> LoadResult:
    return run_load(base_url, SHORT_LOAD, timeout_s=deadline_s, deadline_s=deadline_s)
