"""Bad input to every command: exit 2, nothing on stdout, one line on stderr after the
command's error prefix holding the row's text (a pattern: matched from its start), no traceback,
no --out written. Rows hold on both generations unless keyed by the adapter they name."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from harness.planner_cli import run_cli
from harness.releases import installed_row
from sglang_specinit import compat
from sglang_specinit.planner.shipped_examples import EXAMPLES_DIR

LLAMA = str(EXAMPLES_DIR / "llama31-8b-eagle3" / "target")
MODEL_CONFIGS = r"sglang 0\.5\.23 cannot read the model configs \(config\.json\)"


def rows(table: str) -> dict[str, tuple[str, str]]:
    """``case | argv | message`` a line, a long one continued on an indented line; ``{tmp}``
    etc. filled in by the test; a message ``re:PATTERN`` is matched from the line's start."""
    lines = table.replace("\n    ", " ").strip().splitlines()
    cells = [line.split(" | ", 2) for line in lines if not line.startswith("#")]
    return {case: (argv, message) for case, argv, message in cells}


# Left to test_plan_verdicts (the same refusal, both generations): --mem-fraction-static 0, 1 or
# 1.5, an unknown flag, a target without architectures, an absent draft path, EAGLE3 without one.
BAD_INPUTS = rows(r"""
missing path | plan --model-path {tmp}/nope | is not a local directory
# A config.json transformers cannot read: a zero it divides by, a mistyped field; a draft's.
heads zero | plan --model-path {tmp}/heads-zero
    | re:(SGLang cannot build a ModelConfig from {tmp}/heads-zero|{configs}): integer division
mistyped field | plan --model-path {tmp}/mistyped
    | re:(SGLang cannot build a ModelConfig from {tmp}/mistyped|{configs}): .*'hidden_size'
weights summary not an object | plan --model-path {tmp}/list-weights
    | list-weights/weights-size.json: not a weights-size.json summary
# A checkpoint cloned without git-lfs: its shards are pointer files.
lfs pointer shard | plan --model-path {tmp}/lfs
    | lfs/model.safetensors: not a safetensors file (a Git LFS pointer? git lfs pull)
draft heads zero | plan --example llama31-8b-eagle3 --speculative-draft-model-path {tmp}/heads-zero
    | re:(SGLang cannot read the draft's config.json|{configs}): integer
unknown gpu | plan --gpu H300 | valid presets:
    H100-80GB, H100-94GB, H200-141GB, A100-80GB, A100-40GB, L40S, RTX-4090, B200
bad size | plan --device-memory lots | cannot read a size
# SGLang's own argument hook refuses this one (and only this one) without a draft.
dflash without draft | plan --model-path {llama} --speculative-algorithm DFLASH
    | requires setting --speculative-draft-model-path
unknown example | plan --example nope | shipped examples
# Sizes SGLang divides by: every launch with one of them at 0 fails.
tp zero | plan --tp 0 | --tp-size 0: the launch fails (SGLang divides by it); pass 1 or more
page size zero | plan --page-size 0
    | --page-size 0: the launch fails (SGLang divides by it); pass 1 or more
plan option without its value | plan --example | argument --example: expected one
patches option without its value | patches --release | argument --release: expected
# Every CUDA rank's Llama asserts the head split (32 heads, 8 KV heads). With "tp zero": the
# launch flags are parsed as launch_server parses them (--tp is --tp-size).
tp that does not split the heads | plan --tp 3 | pass a --tp-size that does: 1, 2, 4, 8, 16, 32
# The 8B pair's weights exceed an automatic budget of 16 GiB.
weights that do not fit | plan --device-memory 16GiB | leave no room for the KV cache
report unknown example | report --out {tmp}/r --example x | shipped examples
report absent | report --out {tmp}/r --from-json {tmp}/absent.json | no such file or directory
report not a breakdown | report --out {tmp}/r --from-json {tmp}/x.json
    | not a sglang-specinit breakdown
report not json | report --out {tmp}/r --from-json {tmp}/broken.json | is not JSON
report partial breakdown | report --out {tmp}/r --from-json {tmp}/partial.json
    | not a sglang-specinit breakdown (it needs tokens, budget_bytes, target_weight_bytes
report no rank files | report --out {tmp}/r --from-json {tmp}/empty | holds no memory-rank*.json
# A plan the report accepts, and an --out it cannot write.
report out under a file | report --out {tmp}/file/report --example llama31-8b-eagle3
    | re:cannot write .*no directory
report out in proc | report --out /proc/specinit-report --example llama31-8b-eagle3
    | re:cannot write .*/proc/specinit-report
report without out | report | --out
# --beside a venv without a served SGLang: no python, or one that prints nothing.
report beside no python | report --out {tmp}/r --example llama31-8b-eagle3 --beside {tmp}/empty
    | re:--beside {tmp}/empty: .*
report beside bin true | report --out {tmp}/r --example llama31-8b-eagle3 --beside {tmp}/true-venv
    | re:--beside {tmp}/true-venv: .*
patches unserved release | patches --release 0.5.24 | 0.5.24; pass --release one of {releases}
unknown command | frobnicate | unknown command 'frobnicate'
""")
BY_GENERATION = {
    "sglang_0_5_13": rows(r"""
unsupported architecture | plan --model-path {tmp}/dsv4 | DeepSeek-V4
# An example this release's replay refuses from config.json alone.
refused example | plan --example deepseek-v4-flash-mtp
    | DeepSeek-V4 compressed KV pools (c4/c128/state) are not priced on sglang 0.5.13.post1
# The plan is the installed release's own code: another release is planned in its venv.
another release | plan --sglang-version 0.5.14
    | re:--sglang-version 0\.5\.14: .* report --beside VENV$
# The planner has one stage's view; PP stages differ in layers and weights.
pipeline parallel | plan --model-path {llama} --pp-size 2 --gpu H100-80GB
    | --pp-size 2: the planner plans one pipeline stage
"""),
    "sglang_0_5_23": rows(r"""
# SGLang's resolution hooks build the ModelConfig a config.json lacks fields for.
unsupported architecture | plan --model-path {tmp}/dsv4 | re:{configs}: .*'sliding_window'
DeepSeek-V4 without a draft
    | plan --model-path {examples}/deepseek-v4-flash-mtp/target --trust-remote-code --tp 4
    | DeepSeek-V4 without a speculative draft
# Raised as a RuntimeError by the KV-cache resolution hook, not an assertion.
nvfp4 kv cache on hopper | plan --kv-cache-dtype nvfp4
    | refuses this launch: --kv-cache-dtype=nvfp4 requires Blackwell
pipeline parallel with EAGLE3 | plan --pp-size 2
    | Pipeline parallelism currently only supports EAGLE
# PP + EAGLE: with SGLANG_ENABLE_PP_SPEC=1 stages differ; without, PD prefill nodes only.
pp eagle, SGLANG_ENABLE_PP_SPEC=1 | plan --example llama31-70b-eagle-tp4 --pp-size 2
    | the planner plans one rank and PP stages differ
pp eagle, pd-prefill only | plan --example llama31-70b-eagle-tp4 --pp-size 2
    | PP + speculative decoding (MTP) is only supported on prefill nodes
0.5.13 rule here | plan --sglang-version 0.5.13.post1 | plan in sglang 0.5.13.post1's environment
# SGLang's own refusals: a bare assert (its line is the message), a missing runtime.
attention dp that does not split tp | plan --attn-dp-size 3 --tp 2
    | refuses this launch: assert cfg.tp_size % cfg.attn_dp_size == 0
npu without torch_npu | plan --device npu
    | refuses this launch: torch_npu is required when run on npu device
0.5.13-only flag | plan --disable-piecewise-cuda-graph
    | unrecognized arguments: --disable-piecewise-cuda-graph
"""),
}
ROWS = {**BAD_INPUTS, **BY_GENERATION[installed_row().adapter]}
LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 16060522496\n"
LLAMA_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
FILES = {
    "dsv4/config.json": {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"},
    "x.json": {"a": 1},
    "partial.json": {"tokens": 5, "budget_bytes": 10},
    "list-weights/config.json": LLAMA_CONFIG,
    "lfs/config.json": LLAMA_CONFIG,
    "list-weights/weights-size.json": [1],
    "heads-zero/config.json": {**LLAMA_CONFIG, "num_attention_heads": 0},
    "mistyped/config.json": {**LLAMA_CONFIG, "hidden_size": "big"},
}


@pytest.mark.parametrize("case", sorted(ROWS))
def test_bad_input_exits_2_with_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, case: str
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SGLANG_ENABLE_PP_SPEC", raising=False)
    if case.endswith("SGLANG_ENABLE_PP_SPEC=1"):
        monkeypatch.setenv("SGLANG_ENABLE_PP_SPEC", "1")
    for name, data in FILES.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(json.dumps(data))
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "lfs" / "model.safetensors").write_text(LFS_POINTER)
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "true-venv" / "bin").mkdir(parents=True)
    (tmp_path / "true-venv" / "bin" / "python").symlink_to("/bin/true")
    argv, message = ROWS[case]
    fields = {"examples": EXAMPLES_DIR, "llama": LLAMA, "configs": MODEL_CONFIGS}
    fields["releases"] = ", ".join(compat.supported_releases())
    argv = argv.format(tmp=tmp_path, **fields).split()
    line = run_cli(argv).refusal_line()
    command = f" {argv[0]}" if argv[0] in ("plan", "report", "patches") else ""
    prefix = f"sglang-specinit{command}: error: "
    assert line.startswith(prefix), line
    if message.startswith("re:"):
        pattern = message.removeprefix("re:").format(tmp=re.escape(str(tmp_path)), **fields)
        assert re.match(pattern, line.removeprefix(prefix)), line
    else:
        assert message.format(tmp=tmp_path, **fields) in line, line
    if "--out" in argv[1:]:
        assert not Path(argv[argv.index("--out") + 1]).exists()
