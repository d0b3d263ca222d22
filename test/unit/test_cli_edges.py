"""The command line's edges: ``--version``, a closed pipe, the served releases in
``patches --help``, and bad input to every command; each is one line or silence, never a
traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

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


# Bad input: exit 2, nothing on stdout, one line on stderr after the command's error prefix that
# holds the case's text (a compiled pattern: matches it), and no --out written. {tmp} in argv is
# a scratch directory `scratch` fills.

LLAMA = str(EXAMPLES_DIR / "llama31-8b-eagle3" / "target")
DSV4 = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"}
DRAFT = "--speculative-draft-model-path"
FRACTION = "--mem-fraction-static"
GPUS = "H100-80GB, H100-94GB, H200-141GB, A100-80GB, A100-40GB, L40S, RTX-4090, B200"
REPORT_PLAN = "report --out {tmp}/r --example llama31-8b-eagle3"
BAD_INPUTS = {
    "missing path": ("plan --model-path {tmp}/nope", "is not a local directory"),
    "missing draft path": (f"plan --example llama31-8b-eagle3 {DRAFT} {{tmp}}/x", DRAFT),
    "no architectures": ("plan --model-path {tmp}/no-arch", "no 'architectures'"),
    "fraction zero": (f"plan {FRACTION} 0", f"{FRACTION} 0.0 is outside (0, 1)"),
    "fraction one": (f"plan {FRACTION} 1", f"{FRACTION} 1.0 is outside (0, 1)"),
    "unknown gpu": ("plan --gpu H300", GPUS),
    "bad size": ("plan --device-memory lots", "cannot read a size"),
    "unsupported architecture": ("plan --model-path {tmp}/dsv4", "DeepSeek-V4"),
    # An example this release's replay refuses from config.json alone.
    "refused example": (
        "plan --example deepseek-v4-flash-mtp",
        "DeepSeek-V4 compressed KV pools (c4/c128/state) are not priced on sglang 0.5.13.post1",
    ),
    # SGLang's own argument hook refuses this one (and only this one) without a draft.
    "dflash without draft": (
        f"plan --model-path {LLAMA} --speculative-algorithm DFLASH",
        "requires setting --speculative-draft-model-path",
    ),
    # Its checkpoint would load as the draft; every rank fails binding the draft's head.
    "eagle3 without draft": (
        f"plan --model-path {LLAMA} --speculative-algorithm EAGLE3",
        "pass --speculative-draft-model-path an EAGLE3 draft",
    ),
    "unknown example": ("plan --example nope", "shipped examples"),
    # Sizes SGLang divides by: every launch with one of them at 0 fails.
    "tp zero": (
        "plan --tp 0",
        "--tp-size 0: the launch fails (SGLang divides by it); pass 1 or more",
    ),
    "page size zero": (
        "plan --page-size 0",
        "--page-size 0: the launch fails (SGLang divides by it); pass 1 or more",
    ),
    "unknown flag": ("plan --no-such-flag", "unrecognized arguments"),
    # Every CUDA rank's Llama asserts the head split (32 heads, 8 KV heads).
    "tp that does not split the heads": (
        "plan --tp 3",
        "pass a --tp-size that does: 1, 2, 4, 8, 16, 32",
    ),
    # The 8B pair's weights exceed an automatic budget of 16 GiB.
    "weights that do not fit": ("plan --device-memory 16GiB", "leave no room for the KV cache"),
    # The planner has one stage's view; PP stages differ in layers and weights.
    "pipeline parallel": (
        f"plan --model-path {LLAMA} --pp-size 2 --gpu H100-80GB",
        "--pp-size 2: the planner plans one pipeline stage",
    ),
    "report absent": (
        "report --out {tmp}/r --from-json {tmp}/absent.json",
        "no such file or directory",
    ),
    "report not a breakdown": (
        "report --out {tmp}/r --from-json {tmp}/x.json",
        "not a sglang-specinit breakdown",
    ),
    "report not json": ("report --out {tmp}/r --from-json {tmp}/broken.json", "is not JSON"),
    "report no rank files": (
        "report --out {tmp}/r --from-json {tmp}/empty",
        "holds no memory-rank*.json",
    ),
    # A plan the report accepts, and an --out it cannot write.
    "report out under a file": (
        "report --out {tmp}/file/report --from-json {tmp}/plan.json",
        re.compile("^sglang-specinit report: error: cannot write .*no directory"),
    ),
    "report out in proc": (
        "report --out /proc/specinit-report --from-json {tmp}/plan.json",
        re.compile("^sglang-specinit report: error: cannot write .*/proc/specinit-report"),
    ),
    "report without out": ("report", "--out"),
    # --beside a venv without a served SGLang: no python, or one that prints nothing.
    "report beside no python": (
        REPORT_PLAN + " --beside {tmp}/empty",
        re.compile("^sglang-specinit report: error: --beside {tmp}/empty: "),
    ),
    "report beside bin true": (
        REPORT_PLAN + " --beside {tmp}/true-venv",
        re.compile("^sglang-specinit report: error: --beside {tmp}/true-venv: "),
    ),
    "patches unserved release": (
        "patches --release 0.5.24",
        "0.5.24; pass --release one of " + ", ".join(compat.supported_releases()),
    ),
    "unknown command": ("frobnicate", "unknown command 'frobnicate'"),
}


@pytest.fixture(scope="module")
def plan_json() -> str:
    """``plan --json``: a plan the report accepts."""
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["plan", "--json"]) == 0
    return out.getvalue()


@pytest.fixture
def scratch(tmp_path: Path, plan_json: str) -> Path:
    files = {
        "no-arch/config.json": {"model_type": "llama", "hidden_size": 64},
        "dsv4/config.json": DSV4,
        "x.json": {"a": 1},
    }
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(json.dumps(data))
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "plan.json").write_text(plan_json)
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "true-venv" / "bin").mkdir(parents=True)
    (tmp_path / "true-venv" / "bin" / "python").symlink_to("/bin/true")
    return tmp_path


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], scratch: Path, case: str
) -> None:
    argv, message = BAD_INPUTS[case]
    argv = argv.format(tmp=scratch).split()
    code, (out, err) = main(argv), capsys.readouterr()
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    command = f" {argv[0]}" if argv[0] in ("plan", "report", "patches") else ""
    assert line.startswith(f"sglang-specinit{command}: error: "), line
    if isinstance(message, re.Pattern):
        assert re.search(message.pattern.format(tmp=re.escape(str(scratch))), line), line
    else:
        assert message in line, line
    if "--out" in argv[1:]:
        assert not Path(argv[argv.index("--out") + 1]).exists()
