"""Launches whose resolved attention kernels cannot run on the planned GPU
(``sglang_0_5_23/kernel_arch.py``), on the real sglang 0.5.23 resolution, in this process."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints.published_configs import EXAMPLES, dsa_config_dir
from sglang_specinit.planner.cli import main
from sglang_specinit.planner.gpus import DeviceSpec, get_preset, pre_load_free_bytes
from sglang_specinit.sglang_0_5_23 import kernel_arch

pytestmark = pytest.mark.timeout(300)

MTP = (
    "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4"
).split()


@pytest.fixture(scope="module")
def dsa_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = dsa_config_dir(tmp_path_factory.mktemp("dsa"))
    shutil.copy(EXAMPLES / "deepseek-v3-mtp" / "target" / "weights-size.json", directory)
    return directory


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def refusal_line(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 2, (out, err[-2000:])
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def resolved_on(preset: str, launch: list[str]) -> Any:
    from sglang_specinit.sglang_0_5_23.planner_replay import REPLAY

    gpu = get_preset(preset)
    device = DeviceSpec(gpu.name, gpu.total_bytes, pre_load_free_bytes(gpu.total_bytes), sm=gpu.sm)
    return REPLAY.resolve(REPLAY.parse_launch(launch), device)


DSA = ("--example", "deepseek-v3-mtp", "--model-path", "<dsa>")
# The lines the DSA refusal relies on: the DCP override, the kernel call, flashinfer's arch check.
KA = kernel_arch
TRTLLM_LINES = tuple(map(str, (KA.DSA_DCP_PICKS_TRTLLM, KA.DSA_TRTLLM_KERNEL, KA.TRTLLM_GEN_ARCHS)))
DSA_DCP = (
    *("--dsa-decode-backend to 'trtllm' for --dcp-size 8", "sm_100/sm_103/sm_107"),
    "change --dcp-size",
)
# launch -> what its one-line refusal says, and how it ends ("": not checked).
REFUSED = {
    **{
        f"dsa-dcp-on-{gpu}": (
            (*DSA, "--dcp-size", "8", "--gpu", gpu),
            (*DSA_DCP, f"cannot run on {gpu} (sm_90)", *TRTLLM_LINES),
            "",
        )
        for gpu in ("H100-80GB", "H200-141GB")
    },
    "explicit-dsa-trtllm": (
        (*DSA, *"--dsa-decode-backend trtllm --kv-cache-dtype bfloat16 --gpu H200-141GB".split()),
        ("--dsa-decode-backend to 'trtllm' as the launch asks",),
        "change --dsa-decode-backend",
    ),
    "fa3-on-blackwell": (
        ("--attention-backend", "fa3", "--gpu", "B200"),
        (
            "--attention-backend to 'fa3' as the launch asks",
            "cannot run on B200 (sm_100)",
            f"sm_8x or sm_9x ({kernel_arch.FA3_ARCHS})",
        ),
        "change --attention-backend",
    ),
    "fa3-mla-on-ampere": (
        ("--example", "deepseek-v3-mtp", "--attention-backend", "fa3", "--gpu", "A100-80GB"),
        ("cannot run on A100-80GB (sm_80)", "runs only on sm_9x"),
        "change --attention-backend",
    ),
}


@pytest.mark.parametrize(("argv", "says", "ends"), REFUSED.values(), ids=REFUSED)
def test_a_kernel_the_planned_gpu_cannot_run_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], dsa_dir: Path, argv: tuple, says: tuple, ends: str
) -> None:
    line = refusal_line(capsys, *(str(dsa_dir) if a == "<dsa>" else a for a in argv))
    assert line.startswith("sglang-specinit plan: error: sglang 0.5.23 resolves "), line
    assert line.endswith(ends) and all(text in line for text in says), line


def test_dsa_dcp_on_b200_plans_with_the_trtllm_kernels(
    capsys: pytest.CaptureFixture[str], dsa_dir: Path
) -> None:
    launch = ["--model-path", str(dsa_dir), "--tp", "8", "--dcp-size", "8", *MTP]
    resolved = resolved_on("B200", launch)
    mla = resolved.target_model_config.attention_arch.name == "MLA"
    needs = kernel_arch.kernel_needs(resolved.args, resolved.launch_inputs, mla=mla)
    assert [(n.field, n.value) for n in needs] == [
        ("dsa_decode_backend", "trtllm"),
        ("dsa_prefill_backend", "trtllm"),
    ]
    assert all(n.runs_on(100) and not n.runs_on(90) for n in needs)

    code, out, err = run(
        capsys,
        *("--example", "deepseek-v3-mtp", "--model-path", str(dsa_dir)),
        *("--dcp-size", "8", "--gpu", "B200", "--json"),
    )
    assert code == 0, err[-2000:]
    assert json.loads(out)["tokens"] > 0


@pytest.mark.parametrize("gpu", ["H100-80GB", "L40S"])
def test_fa3_where_it_runs_plans(capsys: pytest.CaptureFixture[str], gpu: str) -> None:
    llama = str(EXAMPLES / "llama31-8b-eagle3" / "target")
    resolved = resolved_on(gpu, ["--model-path", llama, "--attention-backend", "fa3"])
    needs = kernel_arch.kernel_needs(resolved.args, resolved.launch_inputs, mla=False)
    assert [(n.field, n.value) for n in needs] == [("attention_backend", "fa3")]
    code, _, err = run(capsys, "--attention-backend", "fa3", "--gpu", gpu)
    assert code == 0, err[-2000:]


def _wheel_root(wheel: str) -> Path | None:
    name = wheel.split()[0]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parents[1]


@pytest.mark.parametrize("source", kernel_arch.SOURCES, ids=str)
def test_each_cited_line_says_what_the_rule_relies_on(source: kernel_arch.Source) -> None:
    import sglang

    root = _wheel_root(source.wheel)
    if root is None:
        pytest.skip(f"{source.wheel} is not installed here (the planner needs none)")
    if source.wheel.startswith("sglang") and sglang.__version__ != kernel_arch.READ_IN:
        pytest.skip(f"the lines are {kernel_arch.READ_IN}'s; installed {sglang.__version__}")
    lines = (root / source.path).read_text().splitlines()
    assert source.text in lines[source.line - 1], (str(source), lines[source.line - 1])
