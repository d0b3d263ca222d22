"""The process plumbing both suites share (:mod:`harness.launch.processes`): ports, process
groups, and the bound of a launch that must end by itself (:mod:`harness.launch.engine`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.checkpoints.eagle_drafts import TP2_EAGLE3_DRAFT
from harness.launch import processes
from harness.launch.engine import LaunchDidNotEnd, run_server_to_end, running_members

TEST_DIR = Path(__file__).resolve().parents[1]


def _sglang_accepts_port(port: int) -> bool:
    """SGLang 0.5.13.post1's own check of ``--port`` (it derives the gRPC port from it)."""
    from sglang.srt.server_args import ServerArgs

    args = SimpleNamespace(tool_call_parser=None, port=port)
    try:
        ServerArgs._handle_deprecated_args(args)
    except ValueError:
        return False
    return True


def test_free_port_is_one_sglang_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SGLANG_GRPC_PORT", raising=False)
    # The check this guards against: an ephemeral port Linux hands out (32768-60999) that
    # SGLang refuses.
    assert not _sglang_accepts_port(56000)
    ports = [processes.free_port() for _ in range(300)]
    assert all(_sglang_accepts_port(p) for p in ports)
    assert max(ports) <= processes.MAX_HTTP_PORT


# A leader that starts two children which ignore SIGTERM (as a busy scheduler may), records
# their pids, then either keeps running or exits at once with an error (a server that died
# at start-up while its children live on).
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

# Runs in a fresh interpreter, as the GPU suite's pytest process does: become the subreaper,
# start the leader in its own group, let it die (SIGKILL or its own exit), then kill_group.
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
        env={**os.environ, "PYTHONPATH": str(TEST_DIR)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["leader_rc"] == (-9 if how == "sigkill" else 3)
    assert result["subreaper"] is True
    # The leader is gone but its children were alive, still in its group, adopted by the
    # subreaper; afterwards none is left, not even as a zombie.
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
            draft_model_path=eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
            algorithm="EAGLE3",
            tp_size=2,
        )
    assert "launch still running after 3 s" in str(hang.value)
    assert "--- last 12 lines of " in str(hang.value) or "<empty log>" in str(hang.value)
    (session,) = seen
    assert running_members(session) == []
