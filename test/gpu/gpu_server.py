"""Launch and stop a real ``sglang.launch_server`` on a GPU runner (helpers for test/gpu)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class GpuServer:
    proc: subprocess.Popen
    base_url: str
    report_dir: Path
    log_path: Path

    def post(self, path: str, payload: dict[str, Any], timeout_s: float = 300) -> Any:
        request = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return json.loads(response.read())

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base_url + path, timeout=60) as response:
            return json.loads(response.read())

    def breakdowns(self) -> list[dict[str, Any]]:
        return [
            json.loads(p.read_text()) for p in sorted(self.report_dir.glob("memory-rank*.json"))
        ]

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def launch_server(args: list[str], work_dir: Path, timeout_s: float = 1800) -> GpuServer:
    port = _free_port()
    report_dir = work_dir / "reports"
    report_dir.mkdir(parents=True, exist_ok=True)
    log_path = work_dir / "server.log"
    env = dict(os.environ, SGLANG_SPECINIT_REPORT_DIR=str(report_dir))
    cmd = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *args,
    ]
    log = open(log_path, "w")  # noqa: SIM115 (kept open for the server's lifetime)
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    server = GpuServer(proc, f"http://127.0.0.1:{port}", report_dir, log_path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(server.base_url + "/health", timeout=5) as response:
                if response.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(2)
    stop_server(server)
    raise TimeoutError(f"server not healthy after {timeout_s}s:\n{server.log_tail()}")


def stop_server(server: GpuServer) -> None:
    if server.proc.poll() is None:
        os.killpg(server.proc.pid, signal.SIGTERM)
        try:
            server.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.proc.pid, signal.SIGKILL)
