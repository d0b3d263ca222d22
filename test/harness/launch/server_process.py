"""One ``python -m sglang.launch_server`` process tree, for the CPU harness and the GPU suite."""

from __future__ import annotations

import json
import os
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.cpu_doubles import faults, shims
from harness.launch.processes import (
    GroupMember,
    format_rank_tails,
    free_port,
    kill_group,
    start_in_own_group,
    tail,
)
from harness.launch.sglang_release import SGL_KERNEL_STUB_DIR, extra_python_path
from harness.reports import scheduler_report

# Its sitecustomize installs the harness's hooks in every process SGLang spawns.
SITE_DIR = Path(__file__).resolve().parent / "site"
# SGLang's own plugin whitelist (SGLANG_PLUGINS) switches the plugin: its entry point name to
# load it, a name no entry point has to run stock SGLang.
PLUGIN_ENTRY_POINT = "specinit"
PLUGIN_DISABLED = "none-specinit-disabled"


# What only a CPU run may carry: the CPU doubles' switches and what puts SGLang on CPU.
CPU_DOUBLE_VARIABLES = (
    shims.SHIMS_ENV,
    shims.CAPACITY_ENV,
    shims.PER_DEVICE_CAPACITY_ENV,
    shims.NATIVE_MOVE_KV_ENV,
    faults.FAIL_DRAFT_RANK_ENV,
    faults.PAUSE_DRAFT_POOL_ENV,
    scheduler_report.REPORT_DIR_ENV,
    "SGLANG_USE_CPU_ENGINE",
    "SGLANG_CPU_OMP_THREADS_BIND",
)
CPU_DOUBLES_DIR = SGL_KERNEL_STUB_DIR.parent


def sglang_process_env(
    *,
    plugin: bool,
    base: Mapping[str, str],
    extra: Mapping[str, str] | None = None,
    cpu_doubles: bool = True,
) -> dict[str, str]:
    """``base`` + the site dir first on ``PYTHONPATH`` + the plugin switch (``cpu_doubles=False``,
    a GPU server: without the release's CPU-only path entries, 0.5.23's sgl_kernel double)."""
    python_path = [str(SITE_DIR), *(extra_python_path() if cpu_doubles else [])]
    if base.get("PYTHONPATH"):
        python_path.append(base["PYTHONPATH"])
    plugins = PLUGIN_ENTRY_POINT if plugin else PLUGIN_DISABLED
    path = os.pathsep.join(python_path)
    return {**base, "PYTHONPATH": path, "SGLANG_PLUGINS": plugins, **(extra or {})}


def without_cpu_doubles(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the CPU doubles' variables and ``PYTHONPATH`` entries under them."""
    clean = {k: v for k, v in env.items() if k not in CPU_DOUBLE_VARIABLES}
    if "PYTHONPATH" in clean:
        kept = [p for p in clean["PYTHONPATH"].split(os.pathsep) if not _is_cpu_double_dir(p)]
        clean["PYTHONPATH"] = os.pathsep.join(kept)
    return clean


def cpu_double_problems(env: Mapping[str, str]) -> list[str]:
    """Every CPU double ``env`` would put in a server's processes (empty: none)."""
    problems = [
        f"{k}={env[k]!r} is a CPU double's switch" for k in CPU_DOUBLE_VARIABLES if k in env
    ]
    problems += [
        f"PYTHONPATH has the CPU double directory {p}"
        for p in env.get("PYTHONPATH", "").split(os.pathsep)
        if _is_cpu_double_dir(p)
    ]
    return problems


def _is_cpu_double_dir(entry: str) -> bool:
    path = Path(entry).resolve()
    return bool(entry) and CPU_DOUBLES_DIR in (path, *path.parents)


class SGLangStartError(RuntimeError):
    """The Engine or server did not come up; carries the log tail and any scheduler reports."""

    def __init__(self, message: str, *, log_tail: str, reports: list[dict[str, Any]]) -> None:
        errors = [r["error"] for r in reports if "error" in r]
        scheduler = f"\n--- scheduler traceback ---\n{errors[-1]}" if errors else ""
        super().__init__(f"{message}\n--- log tail ---\n{log_tail}{scheduler}")
        self.log_tail = log_tail
        self.reports = reports
        self.scheduler_error = errors[-1] if errors else None


def read_reports(report_dir: Path) -> list[dict[str, Any]]:
    """All harness scheduler reports in ``report_dir`` (success and ``-error`` ones), by name."""
    return [json.loads(p.read_text()) for p in sorted(report_dir.glob("scheduler-*.json"))]


@dataclass
class RunFiles:
    """Where one run writes: its work dir, its log and a directory for JSON reports."""

    work_dir: Path
    log_path: Path
    report_dir: Path

    @classmethod
    def make(cls, work_dir: str | os.PathLike[str] | None, stem: str) -> RunFiles:
        root = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix=stem))
        (root / "reports").mkdir(parents=True, exist_ok=True)
        return cls(root, root / f"{stem}.log", root / "reports")


class RunHandle:
    files: RunFiles

    @property
    def log_path(self) -> Path:
        return self.files.log_path

    @property
    def report_dir(self) -> Path:
        return self.files.report_dir

    def scheduler_reports(self) -> list[dict[str, Any]]:
        return read_reports(self.report_dir)

    def scheduler_report(self) -> dict[str, Any]:
        """The single successful scheduler report (tp_size=1 runs have one scheduler)."""
        reports = self.scheduler_reports()
        ok = [r for r in reports if "error" not in r]
        if len(ok) != 1:
            raise AssertionError(
                f"expected exactly one scheduler report, found {len(ok)} "
                f"(+{len(reports) - len(ok)} error reports)\n--- log tail ---\n{self.log_tail()}"
            )
        return ok[0]

    def log_tail(self, lines: int = 80) -> str:
        return tail(self.log_path, lines)

    def start_error(self, message: str, every_rank: bool = False) -> SGLangStartError:
        """``message`` with the log's tail (or every rank's) and the scheduler reports."""
        log = format_rank_tails(self.log_tail(100_000)) if every_rank else self.log_tail()
        return SGLangStartError(message, log_tail=log, reports=self.scheduler_reports())


@dataclass
class ServerHandle(RunHandle):
    """A running ``sglang.launch_server`` on a loopback port."""

    proc: Any  # subprocess.Popen[bytes]
    files: RunFiles
    port: int
    argv: list[str]
    startup_s: float = 0.0
    # Members of the process group still present after teardown (empty when all were reaped).
    leftovers: list[GroupMember] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def post(self, path: str, payload: Mapping[str, Any], timeout_s: float = 120.0) -> Any:
        req = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return json.loads(resp.read())

    def server_info(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.base_url + "/server_info", timeout=30) as resp:
            return json.loads(resp.read())

    def healthy(self) -> bool:
        """``/health`` answers 200 now."""
        try:
            with urllib.request.urlopen(self.base_url + "/health", timeout=5) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):  # HTTPError (not 200) included
            return False


@contextmanager
def running_server(
    launch_argv: Sequence[str],
    *,
    env: Mapping[str, str],
    files: RunFiles,
    startup_timeout_s: float,
    grace_s: float = 3.0,
    poll_s: float = 0.5,
) -> Iterator[ServerHandle]:
    """Run ``launch_argv + --host 127.0.0.1 --port P`` until the block ends."""
    port = free_port()
    argv = [*launch_argv, "--host", "127.0.0.1", "--port", str(port)]
    proc = start_in_own_group(argv, log_path=files.log_path, env=env, cwd=files.work_dir)
    handle = ServerHandle(proc=proc, files=files, port=port, argv=argv)
    try:
        started = time.monotonic()
        deadline = started + startup_timeout_s
        while not handle.healthy():
            if proc.poll() is not None:
                raise handle.start_error(f"launch_server exited with rc={proc.returncode}")
            if time.monotonic() > deadline:
                # A hang at TP > 1 is often one rank waiting for another: show every rank.
                msg = f"launch_server not healthy after {startup_timeout_s:.0f} s"
                raise handle.start_error(msg, every_rank=True)
            time.sleep(poll_s)
        handle.startup_s = time.monotonic() - started
        yield handle
    finally:
        handle.leftovers = kill_group(proc, grace_s=grace_s)
