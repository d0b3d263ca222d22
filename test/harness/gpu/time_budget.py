"""How long each GPU test may take, and so how long the workflow's job must be allowed to run."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from harness.gpu import gpu_cases, load

STARTUP_ENV = "SPECINIT_GPU_STARTUP_TIMEOUT_S"
DEVICE_WAIT_ENV = "SPECINIT_GPU_MEMORY_WAIT_S"
TEST_TIMEOUT_ENV = "SPECINIT_GPU_TEST_TIMEOUT_S"
FIRST_STARTUP_S = 1800.0  # model load + FlashInfer JIT + graph capture, a first run (estimate)
STARTUP_S = 600.0  # the same with the JIT cache warm (estimate)
DEVICE_WAIT_S = 300.0
SMOKE_DEVICE_WAIT_S = 120.0
# Prompts (4 x 96 greedy tokens, stock twice), /server_info, and the short load's deadline.
SERVE_S = 180.0 + load.SHORT_LOAD_DEADLINE_S
TEARDOWN_S = 60.0  # gpu_server.TEARDOWN_GRACE_S
# Installing the release's CUDA stack and fetching checkpoints, before the suite (estimate).
JOB_SETUP_S = 3600.0
CASE_TEST = "test_case_fits_its_budget_and_matches_stock"  # once per case
# The eagle3 case's full-pool loads at f: plugin on, then stock.
LOAD_TESTS = (
    "test_full_kv_cache_is_served_without_running_out_of_memory",
    "test_stock_sglang_overshoots_the_same_budget",
)
TP2_TEST = "test_tp2_every_rank_within_its_budget_against_its_own_cuda_memory"
PLANNER_TEST = "test_0_5_23_plan_prices_pools_on_this_gpu_as_the_server_does"  # 0.5.23 only
# Per test function: its launches (the case: plugin, stock; both again at lower f) and what it
# runs beyond them (a load's deadline, the planner's two commands).
LAUNCHES = {CASE_TEST: 4, **dict.fromkeys(LOAD_TESTS, 1), TP2_TEST: 1, PLANNER_TEST: 0}
EXTRA_S = {**dict.fromkeys(LOAD_TESTS, load.DEADLINE_S), PLANNER_TEST: 2 * 600.0}


def startup_s(first: bool, env: Mapping[str, str] | None = None) -> float:
    value = (os.environ if env is None else env).get(STARTUP_ENV, "").strip()
    if value:
        return float(value)
    return FIRST_STARTUP_S if first else STARTUP_S


def device_wait_s(env: Mapping[str, str] | None, default: float = DEVICE_WAIT_S) -> float:
    value = (os.environ if env is None else env).get(DEVICE_WAIT_ENV, "").strip()
    return float(value) if value else default


def limit_s_of(
    test: str, env: Mapping[str, str] | None = None, *, wait_s: float | None = None
) -> int:
    """One test's limit: its launches' bounds plus what it runs beyond them."""
    override = (os.environ if env is None else env).get(TEST_TIMEOUT_ENV, "").strip()
    if override:
        return int(float(override))
    wait = device_wait_s(env) if wait_s is None else wait_s
    launches = [wait + startup_s(i == 0, env) + SERVE_S + TEARDOWN_S for i in range(LAUNCHES[test])]
    return int(math.ceil(sum(launches) + EXTRA_S.get(test, 0.0)))


def suite_tests(release: str, env: Mapping[str, str]) -> list[str]:
    cases = [c for c in gpu_cases.cases(env, release) if not c.skip]
    once = [t for t in LAUNCHES if t not in (CASE_TEST, PLANNER_TEST)]
    return [CASE_TEST] * len(cases) + once + ([PLANNER_TEST] if release == "0.5.23" else [])


def suite_limit_s(release: str, env: Mapping[str, str]) -> int:
    """Every test at its limit, the JIT's extra start-up counted once."""
    tests = suite_tests(release, env)
    jit_extra = startup_s(True, env) - startup_s(False, env)
    firsts = sum(1 for t in tests if LAUNCHES[t] > 0)
    return int(sum(limit_s_of(t, env) for t in tests) - max(firsts - 1, 0) * jit_extra)


def job_limit_s(release: str, env: Mapping[str, str]) -> int:
    return int(suite_limit_s(release, env) + JOB_SETUP_S)


def smoke_timeout_s(env: Mapping[str, str] | None = None) -> int:
    return limit_s_of(CASE_TEST, env, wait_s=device_wait_s(env, SMOKE_DEVICE_WAIT_S))


if __name__ == "__main__":
    # The command's default: the largest per-test limit; ``--smoke``: the smoke's own.
    import sys

    print(smoke_timeout_s() if sys.argv[1:] == ["--smoke"] else max(map(limit_s_of, LAUNCHES)))
