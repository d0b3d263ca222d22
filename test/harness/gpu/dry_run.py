"""``scripts/test-gpu.sh --dry-run``: every server the GPU suite would start, checked, no GPU."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from harness.gpu import gpu_cases, gpu_release
from harness.gpu.server_env import changed_variables, gpu_env, launch_argv
from harness.launch.server_process import cpu_double_problems

# Where the suite's servers would write; the dry run names the place without creating it.
WORK_DIR_PLACEHOLDER = Path("<case-dir>")
SERVERS = "test_gpu_servers.py::"
CASE_TEST = SERVERS + "test_case_fits_its_budget_and_matches_stock"
# The eagle3 case's other tests at f: (test, variant, work directory).
EAGLE3_TESTS = (
    (SERVERS + "test_full_kv_cache_is_served_without_running_out_of_memory", "plugin", "load"),
    (SERVERS + "test_stock_sglang_overshoots_the_same_budget", "stock", "overshoot"),
)
TP2_TEST = (
    "test_gpu_multi_rank.py::test_tp2_every_rank_within_its_budget_against_its_own_cuda_memory"
)


@dataclass(frozen=True)
class PlannedServer:
    case: str
    variant: str  # "plugin" | "stock"
    test: str
    when: str
    argv: list[str]
    env: dict[str, str]


def _server(
    case: gpu_cases.Case,
    variant: str,
    fraction: str,
    *,
    test: str,
    when: str,
    work: str,
    flag: str | None,
    base: Mapping[str, str],
) -> PlannedServer:
    work_dir = WORK_DIR_PLACEHOLDER / case.name / work
    dirs = {"report_dir": work_dir / "reports", "probe_dir": work_dir / "probe"}
    env = gpu_env(plugin=variant == "plugin", case_env=dict(case.env), base=base, **dirs)
    argv = launch_argv(case, fraction, flag)
    return PlannedServer(case.name, variant, test, when, argv, changed_variables(env, base))


def planned_servers(
    env: Mapping[str, str] | None = None, release: str | None = None
) -> Iterator[PlannedServer]:
    env = os.environ if env is None else env
    settings = gpu_release.settings(release or gpu_release.installed_release() or "none")
    flag = settings.deterministic_flag if gpu_cases.deterministic(env) else None
    f, lower = gpu_cases.mem_fraction(env), gpu_cases.stock_mem_fraction(env)
    common = {"flag": flag, "base": env}
    for case in gpu_cases.cases(env, settings.version):
        if case.skip:
            continue
        for variant in ("plugin", "stock"):
            yield _server(case, variant, f, test=CASE_TEST, when="always", work=variant, **common)
        oom = f"stock runs out of memory at f={f}"
        for variant in ("stock", "plugin"):
            work = f"{variant}-lower-f"
            yield _server(case, variant, lower, test=CASE_TEST, when=oom, work=work, **common)
    eagle3 = gpu_cases.case("eagle3", env, settings.version)
    if eagle3.skip:
        return
    for test, variant, work in EAGLE3_TESTS:
        yield _server(eagle3, variant, f, test=test, when="always", work=work, **common)
    tp2 = dataclasses.replace(eagle3, name="eagle3_tp2", tp=2)
    when = "the runner has 2 GPUs"
    yield _server(tp2, "plugin", f, test=TP2_TEST, when=when, work="tp2", flag=None, base=env)


def parse_problem(argv: list[str]) -> str:
    from sglang.srt.server_args import ServerArgs

    if argv[1:3] != ["-m", "sglang.launch_server"]:
        return f"not a launch_server command: {argv[:3]}"
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            namespace = parser.parse_args(argv[3:])
    except SystemExit:
        return stderr.getvalue().strip().splitlines()[-1]
    # Without the post-init, which reads the model and the device.
    with mock.patch.object(ServerArgs, "__post_init__", lambda self: None, create=True):
        ServerArgs.from_cli_args(namespace)
    return ""


def main(argv: list[str] | None = None) -> int:
    del argv
    base = dict(os.environ)
    try:
        servers = list(planned_servers(base))
    except Exception as error:  # a CPU double in an env is raised where the env is built
        print(f"[test-gpu] dry run: {error}", file=sys.stderr)
        return 1
    for server in servers:
        full_env = {k: v for k, v in {**base, **server.env}.items() if v or k not in server.env}
        why = parse_problem(server.argv)
        problems = [f"argv refused by sglang's parser: {why}"] if why else []
        problems += cpu_double_problems(full_env)
        if problems:
            where = f"{server.case} {server.variant} ({server.when})"
            print(f"[test-gpu] dry run: {where}: " + "; ".join(problems), file=sys.stderr)
            return 1
        print(json.dumps(dataclasses.asdict(server)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
