"""The command line's edges: ``--version``, a closed pipe, the served releases in
``patches --help``; each is one line or silence, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version

import pytest
from sglang_specinit import compat
from sglang_specinit.planner.cli import EXIT_CLOSED_PIPE, main
from sglang_specinit.planner.shipped_examples import EXAMPLES_DIR


def test_version_names_this_package_and_the_installed_sglang(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    installed = compat.installed_sglang_version()
    adapter = compat.decide_for_version(installed).adapter
    assert (
        out == f"sglang-specinit {version('sglang-specinit')}; sglang {installed} "
        f"(served by {adapter})\n"
    )


def test_a_closed_pipe_ends_quietly() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "sglang_specinit.planner.cli", "patches"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == EXIT_CLOSED_PIPE


def test_patches_help_lists_the_served_releases() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sglang_specinit.planner.cli", "patches", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert result.returncode == 0, result.stderr
    assert ", ".join(compat.supported_releases()) in result.stdout


@pytest.mark.parametrize("missing", ["sgl_kernel", "x"])
def test_a_missing_sgl_kernel_is_one_line_and_any_other_missing_module_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], missing: str
) -> None:
    """0.5.16 - 0.5.18's memory pool imports sgl_kernel's ops at import (a GPU-less host)."""
    from sglang_specinit.planner import cli

    def no_module(*_args: object) -> None:
        raise ModuleNotFoundError(f"No module named '{missing}'", name=missing)

    monkeypatch.setattr(cli, "_plan", no_module)
    if missing != "sgl_kernel":
        with pytest.raises(ModuleNotFoundError):
            main(["plan"])
        return
    assert main(["plan"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "imports sgl_kernel" in line and "sglang-kernel" in line


def test_pipeline_parallel_without_a_draft_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The planner has one stage's view; PP stages differ in layers and weights."""
    target = EXAMPLES_DIR / "llama31-8b-eagle3" / "target"
    code = main(["plan", "--model-path", str(target), "--pp-size", "2", "--gpu", "H100-80GB"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    (line,) = captured.err.splitlines()
    assert "--pp-size 2: the planner plans one pipeline stage" in line
