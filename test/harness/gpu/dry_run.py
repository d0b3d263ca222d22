"""Every GPU server's command and env, and ``scripts/test-gpu.sh --dry-run`` (no GPU)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from unittest import mock

from harness.gpu import device_memory, gpu_cases, gpu_release, storage_identity, time_budget
from harness.launch.server_process import (
    cpu_double_problems,
    sglang_process_env,
    without_cpu_doubles,
)
from harness.reports import device_probe

REPORT_DIR_ENV = "SGLANG_SPECINIT_REPORT_DIR"


def launch_argv(case: gpu_cases.Case, mem_fraction: str, flag: str | None) -> list[str]:
    return [sys.executable, "-m", "sglang.launch_server", *case.launch_args(mem_fraction, flag)]


def gpu_env(
    *,
    plugin: bool,
    report_dir: Path,
    probe_dir: Path,
    case_env: Mapping[str, str] | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """One GPU server's environment; raises a ``RuntimeError`` on a CPU double."""
    env = sglang_process_env(
        plugin=plugin,
        base=without_cpu_doubles(os.environ if base is None else base),
        cpu_doubles=False,
        extra={
            **(case_env or {}),
            REPORT_DIR_ENV: str(report_dir),
            device_probe.PROBE_ENV: "1",
            device_probe.PROBE_DIR_ENV: str(probe_dir),
            storage_identity.IDENTITY_ENV: "1",
            storage_identity.IDENTITY_DIR_ENV: str(probe_dir),
            device_memory.CUDA_DEVICE_ORDER[0]: device_memory.CUDA_DEVICE_ORDER[1],
        },
    )
    # FlashInfer's JIT runs `ninja` by name: the interpreter's own bin/ goes first.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    problems = cpu_double_problems(env)
    if problems:
        raise RuntimeError("a GPU server's environment has a CPU double: " + "; ".join(problems))
    return env


# Where the suite's servers would write; the dry run names the place without creating it.
WORK_DIR_PLACEHOLDER = Path("<case-dir>")
SERVERS = "test_gpu_servers.py::"
CASE_TEST = SERVERS + time_budget.CASE_TEST
# The eagle3 case's other tests at f: (test, variant, work directory).
EAGLE3_TESTS = (
    (SERVERS + time_budget.LOAD_TESTS[0], "plugin", "load"),
    (SERVERS + time_budget.LOAD_TESTS[1], "stock", "overshoot"),
)
TP2_TEST = "test_gpu_multi_rank.py::" + time_budget.TP2_TEST


def planned_servers(env: Mapping[str, str]) -> Iterator[dict]:
    """Each server as a dict: case, variant, test, when, argv, and the env vars it changes."""
    version = gpu_release.installed_settings().version
    flag = gpu_release.DETERMINISTIC_FLAG if gpu_cases.deterministic(env) else None
    f, lower = gpu_cases.mem_fraction(env), gpu_cases.stock_mem_fraction(env)
    oom = f"stock runs out of memory at f={f}"
    # (case, variant, fraction, test, when, work directory, deterministic flag)
    plan = []
    for case in gpu_cases.cases(env, version):
        if not case.skip:
            plan += [(case, v, f, CASE_TEST, "always", v, flag) for v in ("plugin", "stock")]
            plan += [
                (case, v, lower, CASE_TEST, oom, f"{v}-lower-f", flag) for v in ("stock", "plugin")
            ]
    eagle3 = gpu_cases.case("eagle3", env, version)
    if not eagle3.skip:
        plan += [(eagle3, v, f, test, "always", work, flag) for test, v, work in EAGLE3_TESTS]
        tp2 = dataclasses.replace(eagle3, name="eagle3_tp2", tp=2)
        plan.append((tp2, "plugin", f, TP2_TEST, "the runner has 2 GPUs", "tp2", None))
    for case, variant, fraction, test, when, work, case_flag in plan:
        dirs = {"report_dir": WORK_DIR_PLACEHOLDER / case.name / work / "reports"}
        dirs["probe_dir"] = dirs["report_dir"].with_name("probe")
        server = gpu_env(plugin=variant == "plugin", case_env=dict(case.env), base=env, **dirs)
        changed = {k: v for k, v in server.items() if env.get(k) != v}
        changed.update({k: "" for k in env if k not in server})  # "": a variable it removes
        argv, changed = launch_argv(case, fraction, case_flag), dict(sorted(changed.items()))
        yield dict(case=case.name, variant=variant, test=test, when=when, argv=argv, env=changed)


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


def main() -> int:
    base = dict(os.environ)
    try:
        servers = list(planned_servers(base))
    except Exception as error:  # a CPU double in an env is raised where the env is built
        print(f"[test-gpu] dry run: {error}", file=sys.stderr)
        return 1
    for server in servers:
        changed = server["env"]
        full_env = {k: v for k, v in {**base, **changed}.items() if v or k not in changed}
        why = parse_problem(server["argv"])
        problems = [f"argv refused by sglang's parser: {why}"] if why else []
        problems += cpu_double_problems(full_env)
        if problems:
            where = f"{server['case']} {server['variant']} ({server['when']})"
            print(f"[test-gpu] dry run: {where}: " + "; ".join(problems), file=sys.stderr)
            return 1
        print(json.dumps(server))
    return 0


if __name__ == "__main__":
    sys.exit(main())
