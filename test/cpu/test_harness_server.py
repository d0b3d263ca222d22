"""``launch_server`` helper check (opt-in: ``SPECINIT_TEST_LAUNCH_SERVER=1``, ~25 s).

Opt-in because the Engine smoke tests already cover the same init path; this one only guards
the HTTP helper (free port, /health wait, /get_server_info, process-group teardown).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from harness.engine import ENGINE_TEST_TIMEOUT_S, cpu_server

pytestmark = [
    pytest.mark.cpu_engine,
    pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S),
    pytest.mark.skipif(
        os.environ.get("SPECINIT_TEST_LAUNCH_SERVER") != "1",
        reason="set SPECINIT_TEST_LAUNCH_SERVER=1 to run the launch_server helper check",
    ),
]


def test_eagle_server_comes_up_and_reports(
    tiny_target: Path, tiny_eagle_draft: Path, tmp_path: Path
) -> None:
    with cpu_server(
        tiny_target, draft_model_path=tiny_eagle_draft, algorithm="EAGLE", work_dir=tmp_path
    ) as server:
        info = server.server_info()
        report = server.scheduler_report()
        proc = server.proc
    assert info["speculative_algorithm"] == "EAGLE"
    assert info["max_total_num_tokens"] == report["scheduler"]["max_total_num_tokens"]
    assert sorted(r["role"] for r in report["model_runners"]) == ["draft", "target"]
    assert proc.poll() is not None  # torn down
