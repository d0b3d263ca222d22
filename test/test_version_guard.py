"""On a real release it does not serve (sglang 0.5.12.post1), the plugin steps aside."""

from __future__ import annotations

import subprocess
from functools import partial

import pytest
from harness.launch.plugin_probe import REPO_ROOT, probe_env, registry_probe, same_packages_path
from harness.launch.sglang_release import SGL_KERNEL_STUB_DIR
from harness.releases import SERVED
from sglang_specinit import compat
from sglang_specinit.hooks import adapter_patches

# A declined release, run over the venv of the oldest served release (the next generation).
DECLINED_VERSION = "0.5.12.post1"
GENERATION_VENV = REPO_ROOT / ".venv"
UPSTREAM_PYTHON = GENERATION_VENV / "bin" / "python"
UNPACKED = REPO_ROOT / ".cache" / f"sglang-{DECLINED_VERSION}"
TIMEOUT_S = 180

NO_VENV = f"{GENERATION_VENV.name} is absent: build it with scripts/setup.sh (CI does)"
_run = partial(subprocess.run, capture_output=True, text=True, cwd=str(REPO_ROOT))


@pytest.mark.timeout(TIMEOUT_S * 3 + 30)
@pytest.mark.skipif(not UPSTREAM_PYTHON.exists(), reason=NO_VENV)
def test_plugin_and_planner_step_aside_on_a_declined_release() -> None:
    """The declined wheel (``scripts/sibling_release.sh``) over the venv: the plugin registers
    nothing, and ``plan`` refuses it in one line."""
    unpack = ["bash", "scripts/sibling_release.sh", DECLINED_VERSION, str(GENERATION_VENV)]
    proc = _run([*unpack, "--version"], timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # Its wheel first on PYTHONPATH, the sgl_kernel double, then the plugin this test imports (a
    # worktree's python/, when it comes from PYTHONPATH).
    path = [str(UNPACKED), str(SGL_KERNEL_STUB_DIR), same_packages_path()]
    declined_release = probe_env(PYTHONPATH=":".join(p for p in path if p))
    env = dict(declined_release, SGLANG_USE_CPU_ENGINE="1")
    # Every adapter's patches: none of them may be registered, applied or added.
    patches = [
        p
        for name in compat.generations()
        for p in adapter_patches(compat.load_adapter(name)).values()
    ]
    methods = [(f"{m.module}.{m.class_name}", m.name) for p in patches for m in p.new_methods]
    summary = registry_probe(str(UPSTREAM_PYTHON), env, TIMEOUT_S, methods=methods)

    # The real declined wheel, not the venv's own 0.5.13.post1.
    assert summary["sglang_version"] == DECLINED_VERSION
    assert summary["sglang_file"].startswith(str(UNPACKED))
    # The entry point ran (so the guard, not discovery, is what kept it out) ...
    assert summary["specinit_imported"]
    # One WARNING: older than the oldest served release, where docs/releases.md says why.
    records = [r for r in summary["records"] if "specinit" in r["logger"]]
    warnings = [r["message"] for r in records if r["level"] == "WARNING"]
    assert len(warnings) == 1, records
    assert "is OFF" in warnings[0] and f"sglang {DECLINED_VERSION} is not one" in warnings[0]
    assert "older than 0.5.13" in warnings[0] and "docs/releases.md" in warnings[0]
    # ... and registered, applied and added nothing.
    targets = {hook.target for p in patches for hook in p.hooks}
    assert {t: s for t, s in summary["hooks"].items() if "specinit" in s or t in targets} == {}
    assert not set(summary["patched"]) & targets
    assert summary["added_methods"] == []

    # The planner on the declined release: exit 2, one line naming the served releases.
    plan = [str(UPSTREAM_PYTHON), "-m", "sglang_specinit.planner.cli", "plan", "--json"]
    proc = _run(plan, env=declined_release, timeout=110)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"sglang {DECLINED_VERSION} is installed" in lines[0]
    assert ", ".join(SERVED) in lines[0]


def test_plugin_declines_a_newer_release_with_one_info_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from sglang_specinit import plugin

    monkeypatch.setattr(compat, "installed_sglang_version", lambda: "0.6.0")
    monkeypatch.setattr(plugin, "_registered", False)
    monkeypatch.delenv("SGLANG_SPECINIT_DISABLE", raising=False)
    monkeypatch.delenv("SGLANG_SPECINIT_STRICT", raising=False)
    with caplog.at_level(logging.DEBUG, logger="sglang_specinit"):
        assert plugin.register() is False
    records = [r for r in caplog.records if r.name.startswith("sglang_specinit")]
    assert [r.levelname for r in records] == ["INFO"], records
    assert "0.6.0" in records[0].getMessage() and ", ".join(SERVED) in records[0].getMessage()
    assert compat.state() is None or compat.state().version != "0.6.0"


def test_the_dependency_never_moves_the_host_sglang() -> None:
    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    (sglang,) = [Requirement(d) for d in project["dependencies"] if d.startswith("sglang")]
    for release in (*SERVED, "0.5.21", "0.5.24", "0.6.0", "1.0.0"):
        assert sglang.specifier.contains(release, prereleases=True), release
    assert not sglang.specifier.contains("0.5.12")
