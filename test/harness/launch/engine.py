"""Start ``sglang.Engine`` and ``launch_server`` on device "cpu", for a block or until they end."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.cpu_doubles import faults, shims
from harness.launch.processes import (
    GroupMember,
    format_rank_tails,
    free_port,
    group_members,
    kill_group,
    start_in_own_group,
    tail,
)
from harness.launch.server_process import (
    PLUGIN_ENTRY_POINT,
    RunFiles,
    RunHandle,
    ServerHandle,
    SGLangStartError,  # noqa: F401  (benchmark/bench_budget.py and test_bad_inputs import it here)
    read_reports,
    running_server,
    sglang_process_env,
)
from harness.launch.sglang_release import graphs_off_kwargs, release_tuple
from harness.reports import live_reports, scheduler_report

DEFAULT_CAPACITY_BYTES = 256 << 20
DEFAULT_STARTUP_TIMEOUT_S = 240.0
LAUNCH_SERVER = (sys.executable, "-m", "sglang.launch_server")
# Per-test bound for tests that start one Engine/server: trips only on a hang.
ENGINE_TEST_TIMEOUT_S = 300
# Draft workers built by DraftBackendFactory, which has no torch_native entry.
SPEC_ALGORITHMS_NEEDING_TRITON_DRAFT_BACKEND = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"}


def cpu_engine_kwargs(
    model_path: str | os.PathLike[str],
    *,
    draft_model_path: str | os.PathLike[str] | None = None,
    algorithm: str | None = None,
    mem_fraction_static: float | None = 0.5,
    page_size: int = 1,
    num_steps: int = 3,
    num_draft_tokens: int = 4,
    sglang_release: str | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """``sglang.Engine`` / ``ServerArgs`` kwargs for a CPU run; ``overrides`` win."""
    kwargs: dict[str, Any] = {
        "model_path": str(model_path),
        "device": "cpu",
        "attention_backend": "torch_native",
        **graphs_off_kwargs(release_tuple(sglang_release) if sglang_release else None),
        "grammar_backend": "none",
        "page_size": page_size,
        "log_level": "info",
        "random_seed": 0,
    }
    if mem_fraction_static is not None:
        kwargs["mem_fraction_static"] = mem_fraction_static
    if algorithm is not None:
        kwargs.update(
            speculative_algorithm=algorithm,
            speculative_num_steps=num_steps,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=num_draft_tokens,
        )
        if draft_model_path is not None:
            kwargs["speculative_draft_model_path"] = str(draft_model_path)
        if algorithm.upper() in SPEC_ALGORITHMS_NEEDING_TRITON_DRAFT_BACKEND:
            kwargs["speculative_draft_attention_backend"] = "triton"
    elif draft_model_path is not None:
        raise ValueError("draft_model_path given without a speculative algorithm")
    kwargs.update(overrides)
    return kwargs


def cpu_env(
    *,
    plugin: bool,
    capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
    report_dir: str | os.PathLike[str] | None = None,
    base: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
    tp_size: int = 1,
) -> dict[str, str]:
    """Env of a CPU SGLang tree: shims, plugin on/off, one core per TP rank (``extra`` wins)."""
    env = sglang_process_env(plugin=plugin, base=os.environ if base is None else base)
    env.update(
        {
            "SGLANG_USE_CPU_ENGINE": "1",
            shims.SHIMS_ENV: "1",
            shims.NATIVE_MOVE_KV_ENV: "1",
            shims.CAPACITY_ENV: str(int(capacity_bytes)),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    if report_dir is not None:
        env[scheduler_report.REPORT_DIR_ENV] = str(report_dir)
    else:
        env.pop(scheduler_report.REPORT_DIR_ENV, None)
    if tp_size > 1:
        cores = os.cpu_count() or 1
        env["SGLANG_CPU_OMP_THREADS_BIND"] = "|".join(str(r % cores) for r in range(tp_size))
    env.update(extra or {})
    return env


# Switches that change a launch beyond its flags (and PP with a draft, issue #30): not planned.
UNPLANNED_ENV = (
    faults.FAIL_DRAFT_RANK_ENV,
    faults.PAUSE_DRAFT_POOL_ENV,
    shims.PER_DEVICE_CAPACITY_ENV,
    "SGLANG_ENABLE_PP_SPEC",
)
# Plugin-on launches that came up in this process, once each (harness.matrices.plan_verdicts).
_started: list[tuple[dict[str, Any], int]] = []
_seen: set[str] = set()
_started_lock = threading.Lock()


def note_started(kwargs: Mapping[str, Any], env: Mapping[str, str]) -> None:
    if env.get("SGLANG_PLUGINS") != PLUGIN_ENTRY_POINT or any(k in env for k in UNPLANNED_ENV):
        return
    capacity_bytes = int(env[shims.CAPACITY_ENV])
    key = repr((sorted(kwargs.items()), capacity_bytes))
    with _started_lock:
        if key not in _seen:
            _seen.add(key)
            _started.append((dict(kwargs), capacity_bytes))


def drain_started() -> list[tuple[dict[str, Any], int]]:
    """The launches noted since the last call: (ServerArgs kwargs, device capacity)."""
    with _started_lock:
        started = list(_started)
        _started.clear()
    return started


@dataclass
class EngineHandle(RunHandle):
    """A running CPU Engine (in its driver process) and the files it writes."""

    proc: subprocess.Popen[str]
    files: RunFiles
    startup_s: float = 0.0

    def _read(self, timeout_s: float) -> dict[str, Any]:
        """The driver's next JSON line, within ``timeout_s``."""
        assert self.proc.stdout is not None
        if not select.select([self.proc.stdout], [], [], timeout_s)[0]:
            raise TimeoutError(
                f"no reply from the engine driver in {timeout_s:.0f} s\n"
                f"{format_rank_tails(tail(self.log_path, 100_000))}"
            )
        line = self.proc.stdout.readline()
        if not line:
            raise self.start_error(f"engine driver exited (rc={self.proc.poll()})")
        return json.loads(line)

    def request(self, command: dict[str, Any]) -> Any:
        """Send one command to the driver and return its ``result`` (raises on failure)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        reply = self._read(120.0)
        if "error" in reply:
            raise RuntimeError(f"engine command {command['cmd']!r} failed:\n{reply['error']}")
        return reply["result"]

    def generate(self, prompts: list[str], max_new_tokens: int) -> list[dict[str, Any]]:
        """Greedy ``Engine.generate`` on a list of prompts. Not for spec on CPU."""
        params = {"max_new_tokens": max_new_tokens, "temperature": 0.0}
        return self.request({"cmd": "generate", "prompts": prompts, "sampling_params": params})

    def server_info(self) -> dict[str, Any]:
        return self.request({"cmd": "server_info"})


def _cpu_launch(
    model_path: str | os.PathLike[str],
    work_dir: str | os.PathLike[str] | None,
    *,
    server: bool,
    plugin: bool = False,
    capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
    extra_env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> tuple[RunFiles, dict[str, Any], dict[str, str]]:
    """Files, ServerArgs kwargs, env of a CPU Engine or (``server``, no warm-up) launch_server."""
    files = RunFiles.make(work_dir, "server" if server else "engine")
    if server:
        overrides = {"skip_server_warmup": True, **overrides}
        extra_env = {"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0", **(extra_env or {})}
    kwargs = cpu_engine_kwargs(model_path, **overrides)
    env = cpu_env(
        plugin=plugin,
        capacity_bytes=capacity_bytes,
        report_dir=files.report_dir,
        extra=extra_env,
        tp_size=int(kwargs.get("tp_size") or 1),
    )
    return files, kwargs, env


@contextmanager
def cpu_engine(
    model_path: str | os.PathLike[str],
    *,
    work_dir: str | os.PathLike[str] | None = None,
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
    python: str | os.PathLike[str] | None = None,
    **launch: Any,
) -> Iterator[EngineHandle]:
    """Run ``sglang.Engine`` on CPU in a driver process for the block (keywords: _cpu_launch's)."""
    files, kwargs, env = _cpu_launch(model_path, work_dir, server=False, **launch)
    config_path = files.work_dir / "engine-config.json"
    config_path.write_text(json.dumps({"engine_kwargs": kwargs, "log_path": str(files.log_path)}))
    proc = start_in_own_group(
        [str(python or sys.executable), "-m", "harness.launch.engine_driver", str(config_path)],
        log_path=files.log_path,
        env=env,
        cwd=files.work_dir,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    handle = EngineHandle(proc=proc, files=files)
    try:
        started = time.monotonic()
        event = handle._read(startup_timeout_s)
        if event.get("event") != "ready":
            raise handle.start_error(f"Engine failed to start:\n{event.get('traceback', event)}")
        handle.startup_s = time.monotonic() - started
        note_started(kwargs, env)
        yield handle
    finally:
        # Once a request ran, SGLang's Engine drains on SIGTERM (seconds): nothing to save.
        kill_group(handle.proc, grace_s=0.0)
        live_reports.keep_live_reports(env, files.work_dir.name)


def server_args_to_cli(kwargs: Mapping[str, Any]) -> list[str]:
    """``ServerArgs`` kwargs to flags (True: bare flag, None/False dropped, structures as JSON)."""
    argv: list[str] = []
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, dict) or (
            isinstance(value, (list, tuple)) and any(isinstance(v, (dict, list)) for v in value)
        ):
            argv += [flag, json.dumps(value)]  # a JSON flag (e.g. --forward-hooks)
        elif isinstance(value, (list, tuple)):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


@contextmanager
def cpu_server(
    model_path: str | os.PathLike[str],
    *,
    work_dir: str | os.PathLike[str] | None = None,
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
    **launch: Any,
) -> Iterator[ServerHandle]:
    """Run ``python -m sglang.launch_server --device cpu`` on a free loopback port."""
    files, kwargs, env = _cpu_launch(model_path, work_dir, server=True, **launch)
    argv = [*LAUNCH_SERVER, *server_args_to_cli(kwargs)]
    # Its graceful drain takes ~6 s and there is nothing to save: SIGKILL at once.
    try:
        with running_server(
            argv, env=env, files=files, startup_timeout_s=startup_timeout_s, grace_s=0.0
        ) as handle:
            note_started(kwargs, env)
            yield handle
    finally:
        live_reports.keep_live_reports(env, files.work_dir.name)


# Launches expected to end on their own (fail, or be signalled): bounded, checked.


def running_members(pgid: int) -> list[GroupMember]:
    """Members of process group ``pgid`` that still run (exited-but-unreaped ones excluded)."""
    return [m for m in group_members(pgid) if m.state != "Z"]


@dataclass
class EndedLaunch:
    """A launch that ended on its own (or was signalled by the test) within the bound."""

    returncode: int
    elapsed_s: float
    log: str
    reports: list[dict[str, Any]]
    work_dir: Path
    # Processes of the launch still running 15 s after the launcher exited.
    survivors: list[GroupMember] = field(default_factory=list)
    signalled_at_s: float | None = None
    # ``time.time()`` when the launcher was seen to exit (markers hold their writers' time.time()).
    ended_wall_time: float = 0.0

    def rank_tails(self) -> str:
        return format_rank_tails(self.log)


def assert_ended_cleanly(run: EndedLaunch) -> None:
    """Non-zero exit, and no process of the launch's session outlived it."""
    assert run.returncode != 0, run.rank_tails()
    assert run.survivors == [], run.survivors


class LaunchDidNotEnd(AssertionError):
    """The launch was still running at the bound: a hang. The message has every rank's tail."""


def run_server_to_end(
    model_path: str | Path,
    work_dir: Path,
    *,
    plugin: bool = True,
    bound_s: float = 240.0,
    signal_on_marker: tuple[str, int] | None = None,
    on_start: Callable[[int], None] | None = None,
    **server_args: Any,
) -> EndedLaunch:
    """Run CPU ``launch_server`` until it exits (``server_args``: _cpu_launch's keywords too)."""
    files, kwargs, env = _cpu_launch(
        model_path, work_dir, server=True, plugin=plugin, **server_args
    )
    argv = [*LAUNCH_SERVER, *server_args_to_cli(kwargs)]
    argv += ["--host", "127.0.0.1", "--port", str(free_port())]
    proc = start_in_own_group(argv, log_path=files.log_path, env=env, cwd=work_dir)
    started = time.monotonic()
    if on_start is not None:
        on_start(proc.pid)
    signalled_at = None
    marker, signum = signal_on_marker or (None, 0)
    try:
        while proc.poll() is None:
            elapsed = time.monotonic() - started
            if elapsed > bound_s:
                raise LaunchDidNotEnd(
                    f"launch still running after {bound_s:.0f} s (a rank may be waiting in a "
                    f"collective)\n{format_rank_tails(tail(files.log_path, 100_000))}"
                )
            if marker is not None and signalled_at is None and any(files.report_dir.glob(marker)):
                proc.send_signal(signum)
                signalled_at = elapsed
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        ended_wall_time = time.time()
        deadline = time.monotonic() + 15.0
        while (survivors := running_members(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        return EndedLaunch(
            returncode=proc.returncode,
            elapsed_s=elapsed,
            log=files.log_path.read_text(errors="replace"),
            reports=read_reports(files.report_dir),
            work_dir=work_dir,
            survivors=survivors,
            signalled_at_s=signalled_at,
            ended_wall_time=ended_wall_time,
        )
    finally:
        kill_group(proc, grace_s=3.0)
