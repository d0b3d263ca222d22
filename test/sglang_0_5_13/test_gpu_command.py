"""The GPU suite's command and case selection, checked where they can be: on this CPU machine."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.gpu import (
    downloads,
    dry_run,
    gpu_cases,
    gpu_release,
    gpu_summary,
    gpu_verdict,
    time_budget,
)

REPO = Path(__file__).resolve().parents[2]
SERVERS_TEST = "test.gpu.test_gpu_servers::test_case_fits_its_budget_and_matches_stock"


def _run_gpu_command(
    out_dir: Path, extra_env: dict[str, str], *args: str, preflight: bool = False
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "SPECINIT_GPU_OUT_DIR": str(out_dir)}
    if not preflight:  # no NVIDIA driver here: the preflight would stop the command first
        env["SPECINIT_GPU_SKIP_PREFLIGHT"] = "1"
    env.update(extra_env)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    command = ["bash", "scripts/test-gpu.sh", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_gpu_command_fails_when_no_case_ran(tmp_path: Path) -> None:
    profile = "small"
    # A previous run's memory report on a reused runner must not survive into this run.
    stale = tmp_path / "cases" / "old-run" / "reports" / "memory-rank0-pp0-tp0-dp0.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    done = _run_gpu_command(tmp_path, {gpu_cases.PROFILE_ENV: profile})
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "GPU suite: FAILED, no GPU case ran" in out
    assert not stale.exists()
    # The signal timeout still writes the JUnit report; the default is the largest test limit.
    largest = max(time_budget.limit_s_of(t, {}) for t in time_budget.LAUNCHES)
    assert f"--timeout={largest} --timeout-method=signal" in out
    # Each test's outcome was written as it ended; every case is listed as skipped, with why.
    live = gpu_summary.read_outcomes(tmp_path / "junit-partial.xml")
    outcomes = gpu_summary.read_outcomes(tmp_path / "junit.xml")
    assert {o.name for o in live} == {o.name for o in outcomes}
    names = {c.name for c in gpu_cases.cases({gpu_cases.PROFILE_ENV: profile})}
    listed = {o.name.rsplit("[", 1)[1].rstrip("]") for o in outcomes if "[" in o.name}
    assert names <= listed
    assert outcomes and all(o.outcome == "skipped" for o in outcomes)
    assert all("no CUDA device" in o.detail for o in outcomes), outcomes


FAKE_NVIDIA_SMI = """#!/bin/sh
echo "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |"
"""


def test_gpu_command_stops_at_the_preflight_in_one_line(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    done = _run_gpu_command(tmp_path / "out", {"PATH": path}, preflight=True)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("GPU preflight: FAILED, sglang 0.5.13.post1 needs an NVIDIA driver")
    assert "driver 550.54.15 supports CUDA 12.4" in line and "glibc" in line
    # Nothing ran: no pytest, no report directory.
    assert done.stdout == "" and not (tmp_path / "out").exists()


def test_gpu_smoke_runs_the_eagle3_case_against_stock_from_local_checkpoints(
    tmp_path: Path,
) -> None:
    models = tmp_path / "models"
    smoke = gpu_cases.case(gpu_cases.SMOKE_CASE, {})
    refused = _run_gpu_command(tmp_path / "refused", {}, "--smoke")
    assert refused.returncode == 1
    assert gpu_cases.MODEL_DIR_ENV in refused.stderr and smoke.target in refused.stderr
    (models / smoke.target).mkdir(parents=True)  # <dir>/<org>/<name>
    (models / smoke.draft.rsplit("/", 1)[-1]).mkdir()  # <dir>/<name>
    env = {gpu_cases.MODEL_DIR_ENV: str(models)}
    local = gpu_cases.case(gpu_cases.SMOKE_CASE, env)
    assert local.target == str(models / smoke.target)
    assert local.draft == str(models / smoke.draft.rsplit("/", 1)[-1])
    # A model the directory does not hold stays a hub id.
    assert gpu_cases.case("dflash", env).target == gpu_cases.case("dflash", {}).target
    done = _run_gpu_command(tmp_path / "out", env, "--smoke")
    out = done.stdout + done.stderr
    assert done.returncode != 0, out  # no CUDA here: the one case skipped
    outcomes = gpu_summary.read_outcomes(tmp_path / "out" / "junit.xml")
    assert [(o.name, o.outcome) for o in outcomes] == [(f"{SERVERS_TEST}[eagle3]", "skipped")]
    # Sized from its launches at the smoke's own start-up and device-wait bounds.
    smoke_timeout = time_budget.smoke_timeout_s({})
    assert f"--timeout={smoke_timeout} --timeout-method=signal" in out
    assert "[test-gpu] sglang 0.5.13.post1" in out


def test_summary_passes_a_run_where_a_case_ran_and_fails_a_test_that_hung_at_its_timeout(
    tmp_path: Path,
) -> None:
    torn_down = tmp_path / "torn-down"
    suite, report = tmp_path / "test_generated.py", tmp_path / "junit.xml"
    suite.write_text(
        textwrap.dedent(f"""
        import contextlib, pathlib, time, pytest

        @contextlib.contextmanager
        def server():
            try:
                yield
            finally:
                pathlib.Path({str(torn_down)!r}).write_text("killed")

        def test_ran(): pass
        def test_needs_8(): pytest.skip("multi_layer_mtp needs 8 GPUs, this runner has 1")

        def test_hangs():
            with server():
                time.sleep(600)

        def test_next():
            pass
        """)
    )
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)]
    command += ["--timeout=2", "--timeout-method=signal", f"--junitxml={report}"]
    command.append(f"--rootdir={tmp_path}")
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, timeout=120)
    # The hung test fails with a timeout, its server torn down, the next test runs.
    outcomes = gpu_summary.read_outcomes(report)
    code, text = gpu_summary.verdict(outcomes, done.returncode)
    assert code == 1, text
    assert "failed   test_generated::test_hangs  (Failed: Timeout" in text
    assert "passed   test_generated::test_next" in text and "GPU suite: FAILED" in text
    assert torn_down.read_text() == "killed"
    code, text = gpu_summary.verdict([o for o in outcomes if o.outcome != "failed"], 0)
    assert code == 0
    assert "passed   test_generated::test_ran" in text
    assert "needs 8 GPUs, this runner has 1" in text
    assert "GPU suite: passed (2 passed, 0 failed, 1 skipped)" in text


# Every profile's cases, in order, with their --speculative-algorithm and draft graph.
CASES = [
    ("eagle3", "EAGLE3", "draft"),
    ("eagle3_no_overlap", "EAGLE3", "draft"),
    ("standalone", "STANDALONE", "draft"),
    ("multi_layer_mtp", "EAGLE", "draft_extend"),
    ("dflash", "DFLASH", None),
    ("ngram", "NGRAM", None),
]


@pytest.mark.parametrize("profile", ["full", "small"])
def test_profiles_define_the_same_cases_launch_them_alike_and_fetch_what_they_load(
    profile: str,
) -> None:
    env = {gpu_cases.PROFILE_ENV: profile}
    graph = gpu_verdict.expected_draft_graph
    assert [(c.name, c.algorithm, graph(c.args)) for c in gpu_cases.cases(env)] == CASES
    # eagle3 with and without overlap, on the same models.
    on, off = gpu_cases.case("eagle3", env), gpu_cases.case("eagle3_no_overlap", env)
    assert (on.target, on.draft) == (off.target, off.draft)
    assert on.overlap and not off.overlap
    flag, off_args = "--disable-overlap-schedule", off.launch_args("0.9")
    assert flag not in on.launch_args("0.9") and off_args.count(flag) == 1
    assert [a for a in off_args if a != flag] == on.launch_args("0.9")
    # DFLASH as SGLang's DFLASH CI launches it.
    args = gpu_cases.case("dflash", env).launch_args("0.9")
    joined = " ".join(args)
    assert "--attention-backend flashinfer" in joined and "--page-size 1" in joined
    assert "--disable-overlap-schedule" in args and "--trust-remote-code" in args
    if profile == "small":  # fits one GPU, and says what it cannot run
        small = gpu_cases.cases(env)
        assert all(c.tp == 1 for c in small)
        (mtp,) = [c for c in small if c.name == "multi_layer_mtp"]
        assert "MiMo-V2-Flash" in mtp.skip and "SPECINIT_GPU_MULTI_LAYER_MTP_TARGET" in mtp.skip
        assert all(not c.skip for c in small if c is not mtp)
    # Each checkpoint fetched once, without what SGLang never loads.
    lines = downloads.commands({**env, gpu_cases.MODEL_DIR_ENV: "/models"})
    assert len(set(lines)) == len(lines)
    include = "'*.safetensors' 'pytorch_model*.bin' '*.json' 'tokenizer*' '*.py'"
    for line in lines:
        assert f"--include {include}" in line, line
        assert "original" not in line
    llama_8b = any("meta-llama/Llama-3.1-8B-Instruct --include" in x for x in lines)
    assert llama_8b == (profile == "full")


def test_env_overrides_replace_models_and_tp() -> None:
    env = {
        gpu_cases.PROFILE_ENV: "small",
        "SPECINIT_GPU_EAGLE3_TARGET": "/models/target",
        "SPECINIT_GPU_EAGLE3_DRAFT": "/models/draft",
        "SPECINIT_GPU_EAGLE3_NO_OVERLAP_TP": "2",
        "SPECINIT_GPU_MULTI_LAYER_MTP_TARGET": "/models/mtp",
    }
    on, off = gpu_cases.case("eagle3", env), gpu_cases.case("eagle3_no_overlap", env)
    assert (on.target, on.draft, on.tp) == ("/models/target", "/models/draft", 1)
    assert (off.target, off.draft, off.tp) == ("/models/target", "/models/draft", 2)
    mtp = gpu_cases.case("multi_layer_mtp", env)
    assert (mtp.skip, mtp.target, mtp.draft) == ("", "/models/mtp", "/models/mtp")
    # Both servers get the deterministic flag, unless it is turned off.
    flag = "--enable-deterministic-inference"
    args = on.launch_args("0.85", flag)
    assert args[:6] == "--model-path /models/target --tp 1 --mem-fraction-static 0.85".split()
    assert args[-3:] == ["--speculative-draft-model-path", "/models/draft", flag]
    assert on.launch_args("0.85") == args[:-1]


# (setting, env, its value or the error it raises)
SETTINGS = [
    (gpu_cases.mem_fraction, {}, "0.9"),
    (gpu_cases.mem_fraction, {gpu_cases.MEM_FRACTION_ENV: "1.5"}, "between 0 and 1"),
    (gpu_cases.stock_mem_fraction, {}, "0.8"),
    (gpu_cases.stock_mem_fraction, {gpu_cases.MEM_FRACTION_ENV: "0.85"}, "0.75"),
    (gpu_cases.stock_mem_fraction, {gpu_cases.STOCK_MEM_FRACTION_ENV: "0.7"}, "0.7"),
    (gpu_cases.stock_mem_fraction, {gpu_cases.STOCK_MEM_FRACTION_ENV: "2"}, "between 0 and 1"),
    (gpu_cases.deterministic, {}, True),
    (gpu_cases.deterministic, {gpu_cases.DETERMINISTIC_ENV: "0"}, False),
    (gpu_cases.deterministic, {gpu_cases.DETERMINISTIC_ENV: "yes"}, "must be 0 or 1"),
    (gpu_cases.cases, {gpu_cases.PROFILE_ENV: "huge"}, r"'huge' is not one of \['full', 'small'\]"),
    (gpu_cases.cases, {"SPECINIT_GPU_NGRAM_TP": "two"}, "SPECINIT_GPU_NGRAM_TP='two'"),
    # The suite runs on the matrix's releases only.
    (gpu_release.settings, "0.5.20", r"runs on sglang 0\.5\.13\.post1 or 0\.5\.23, not 0\.5\.20"),
]


@pytest.mark.parametrize(("setting", "env", "expected"), SETTINGS)
def test_settings_are_read_and_bad_ones_refused_with_the_choices(
    setting: Any, env: Any, expected: Any
) -> None:
    if isinstance(expected, str) and not expected[0].isdigit():
        with pytest.raises(ValueError, match=expected):
            setting(env)
    else:
        assert setting(env) == expected


def test_workflow_time_arithmetic_fits_every_test_in_the_job() -> None:
    tb = time_budget
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "gpu.yml").read_text())
    job = workflow["jobs"]["test"]
    (suite_step,) = [s for s in job["steps"] if s.get("name", "").startswith("GPU suite")]
    for release in gpu_release.MATRIX:
        for profile in ("full", "small"):
            env = {gpu_cases.PROFILE_ENV: profile}
            limits = sum(tb.limit_s_of(t, env) for t in tb.suite_tests(release, env))
            assert tb.suite_limit_s(release, env) <= limits
            assert tb.suite_limit_s(release, env) <= suite_step["timeout-minutes"] * 60
            assert tb.job_limit_s(release, env) <= job["timeout-minutes"] * 60
    # And each test's limit holds its own launches at their start-up limits.
    case_test = tb.limit_s_of("test_case_fits_its_budget_and_matches_stock", {})
    assert case_test >= tb.FIRST_STARTUP_S + 3 * tb.STARTUP_S
    # The smoke's is sized from its launches; a first JIT run fits (the old 420 s did not).
    rest = 120 + tb.SERVE_S + tb.TEARDOWN_S
    assert tb.smoke_timeout_s({}) == 4 * rest + tb.FIRST_STARTUP_S + 3 * tb.STARTUP_S
    longer = {"SPECINIT_GPU_STARTUP_TIMEOUT_S": "900", "SPECINIT_GPU_MEMORY_WAIT_S": "300"}
    assert tb.smoke_timeout_s(longer) == 4 * (300 + 900 + tb.SERVE_S + tb.TEARDOWN_S)
    assert tb.startup_s(first=True, env={}) >= 1800
    # The release matrix, one at a time, in one group per GPU pool.
    release_matrix = tuple(job["strategy"]["matrix"]["release"])
    assert release_matrix == gpu_release.MATRIX == ("0.5.13.post1", "0.5.23")
    assert job["strategy"]["max-parallel"] == 1
    group = workflow["concurrency"]["group"]
    assert "github.ref" not in group and "SPECINIT_GPU_POOL" in group
    install = next(s for s in job["steps"] if s.get("name", "").startswith("Install sglang"))
    assert "sglang==${{ matrix.release }}" in install["run"]
    runs = " ".join(s.get("run", "") for s in job["steps"])
    assert "harness.gpu.downloads" in runs and "hf download" not in runs
    (setup,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python")]
    assert setup["with"]["python-version"] == "3.11"


def test_dry_run_fails_in_one_line_on_a_flag_the_release_refuses(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    # 0.5.23's graph flag, which 0.5.13.post1's parser does not know.
    (first, *_) = dry_run.planned_servers({})
    bad = {**first, "argv": [*first["argv"], "--cuda-graph-bs-decode", "1"]}
    monkeypatch.setattr(dry_run, "planned_servers", lambda env: iter([bad]))
    assert dry_run.main() == 1
    out = capsys.readouterr()
    (line,) = out.err.splitlines()
    assert line.startswith("[test-gpu] dry run: eagle3 plugin (always): argv refused")
    assert "unrecognized arguments: --cuda-graph-bs-decode" in line
    assert out.out == ""


def test_summary_prints_the_case_reports_and_reads_the_tests_that_ended_when_pytest_was_killed(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The job killed mid-suite: no junit.xml, but every finished test was written as it ended;
    with neither report the summary fails (with pytest's own code when it has one)."""
    assert gpu_summary.main([str(tmp_path / "missing.xml"), "--pytest-exit-code", "4"]) == 4
    assert gpu_summary.main([str(tmp_path / "missing.xml"), "--pytest-exit-code", "0"]) == 1
    node = "test/gpu/test_gpu_servers.py::test_case"
    gpu_summary.record(tmp_path, f"{node}[eagle3]", "passed", "", 1.0)
    gpu_summary.record(tmp_path, f"{node}[dflash]", "failed", "boom", 2)
    cases = tmp_path / "cases"
    report = gpu_summary.new_report("eagle3", "0.5.23", True, cases / "a")
    with report.launch("plugin", "0.9"):
        pass
    with pytest.raises(RuntimeError), report.launch("stock", "0.9") as entry:
        entry.outcome = "out of memory at start-up"
        raise RuntimeError("CUDA out of memory")
    report.result("stock_at_f", gpu_summary.STOCK_OOM_AT_F.format(f="0.9"))
    with report.launch("stock", "0.8"):
        pass
    report.result("tokens", {"plugin": 392943, "stock": 385171, "ratio": 1.0202})
    report.result("cuda_graph_batch_lists", {"args_equal": True})
    memory = {"peak_used_bytes": {"init": {"0": 70 << 30}, "capture": {"0": 72 << 30}}}
    memory["free_after_capture_bytes"] = {"0": 9 << 30}
    serving = {"accept_length": 3.1, "output_throughput_tok_s": 2100.0, "device_memory": memory}
    report.result("serving", {"plugin": serving, "stock": {"accept_length": 3.1}})
    report.result("verdict", {"tokens": ["worse than stock"]})
    gpu_summary.new_report("ngram", "0.5.13.post1", False, cases / "x").result(
        "stock_at_f", "started"
    )
    summary = tmp_path / "step-summary.md"
    args = ["--cases-dir", str(cases), "--step-summary", str(summary)]
    code = gpu_summary.main([str(tmp_path / "junit.xml"), "--pytest-exit-code", "1", *args])
    out = capsys.readouterr()
    assert code == 1 and "reading junit-partial.xml" in out.err
    assert "passed   test.gpu.test_gpu_servers::test_case[eagle3]" in out.out
    assert "failed   test.gpu.test_gpu_servers::test_case[dflash]  (boom)" in out.out
    lines = out.out.splitlines()
    assert lines[0].startswith("case eagle3 on sglang 0.5.23 (deterministic), ")
    assert "plugin f=0.9: served" in lines[0]
    assert "stock f=0.9: out of memory at start-up" in lines[0]
    assert "stock f=0.8: served" in lines[0]
    assert "    stock_at_f: stock cannot start at f=0.9, the plugin can" in lines
    ngram = lines.index("    stock_at_f: started")
    assert lines[ngram - 1].startswith("case ngram on sglang 0.5.13.post1 (default kernels)")
    # The step summary: one row per case, with tokens and serving.
    header, rule, row, _ = summary.read_text().splitlines()[2:]
    assert header.count("|") == rule.count("|") == row.count("|")
    assert "| eagle3 | 0.5.23 |" in row and "| 392943 | 385171 | 1.0202 | True |" in row
    assert "| 3.10 / 3.10 | 2100 / n/a | 70.0 / 72.0 | 9.0 | tokens |" in row


def sglang_req(payload: dict[str, Any]) -> Any:
    from array import array

    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    return Req(
        "rid-0",
        str(payload["text"]),
        array("i", [1, 2, 3]),
        SamplingParams(**payload["sampling_params"]),
        return_logprob=bool(payload.get("return_logprob", False)),
        top_logprobs_num=int(payload.get("top_logprobs_num", 0)),
    )


def test_dflash_requests_pass_0_5_13_post1s_own_dflash_check() -> None:
    from sglang.srt.speculative.dflash_utils import validate_dflash_request

    release = gpu_release.settings("0.5.13.post1")
    for case in gpu_cases.cases({}, "0.5.13.post1"):
        logprobs = case.algorithm not in release.no_logprobs_for
        payload = gpu_cases.generate_payload(gpu_cases.PROMPTS[0], logprobs=logprobs)
        assert logprobs == (case.algorithm != "DFLASH"), case.name
        if case.algorithm == "DFLASH":
            assert validate_dflash_request(sglang_req(payload)) is None
    # The recorded broken case: the body every case sent before.
    asked = gpu_cases.generate_payload(gpu_cases.PROMPTS[0], logprobs=True)
    assert "return_logprob" in validate_dflash_request(sglang_req(asked))
    assert "DFLASH" not in gpu_release.settings("0.5.23").no_logprobs_for
