"""The fault matrices' rows (refused or starting launches) and ``plan`` on the same flags."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from harness.checkpoints import eagle_drafts, llama_family
from harness.checkpoints.eagle_drafts import TP2_EAGLE3_DRAFT
from harness.checkpoints.llama_layout import TinyLlamaShape
from harness.launch import engine
from harness.launch.engine import drain_started
from harness.launch.processes import rank_log_lines
from harness.planner_cli import Verdict, run_cli

ALGORITHM = "EAGLE3"
SPEC_FLAGS = {"speculative_num_steps": 3, "speculative_eagle_topk": 1}


def intact_draft(tmp_path: Path) -> Path:
    return eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT)


def _damaged_draft(tmp_path: Path, truncate: bool) -> Path:
    """A copy of the intact draft whose shard is cut in half, or whose header is overwritten."""
    draft = tmp_path / "draft"
    shutil.copytree(intact_draft(tmp_path), draft)
    with open(draft / "model.safetensors", "r+b") as f:
        if truncate:
            f.truncate(f.seek(0, os.SEEK_END) // 2)
        else:
            f.seek(8)
            f.write(b"\xff" * 64)
    return draft


@dataclass(frozen=True)
class Launch:
    """The fault matrices' pair with a part broken; ``expect``: the refusal's needles (none: it
    starts); ``live``: a needle of the log of a launch SGLang itself refuses."""

    flags: dict[str, Any] = field(default_factory=dict)
    expect: tuple[str, ...] = ()
    make_draft: Callable[[Path], Path | None] = intact_draft
    make_target: Callable[[Path], Path] = lambda _: llama_family.tiny_llama_target()
    algorithm: str = ALGORITHM
    live: str = ""
    adapters: tuple[str, ...] = ("sglang_0_5_13", "sglang_0_5_23")
    in_ci: bool = True


# Refused by the plugin's checks in the launcher.
REFUSED = {
    "truncated-draft-shard": Launch(
        expect=("draft checkpoint file {draft}/model.safetensors", "it is truncated",
                "--speculative-draft-model-path"),
        make_draft=partial(_damaged_draft, truncate=True),
    ),
    "corrupt-draft-shard": Launch(
        expect=("draft checkpoint file {draft}/model.safetensors", "header is not readable",
                "--speculative-draft-model-path"),
        make_draft=partial(_damaged_draft, truncate=False),
    ),
    "draft-hidden-size": Launch(
        expect=("draft hidden_size 96 ({draft}/config.json)", "target's hidden_size 64",
                "--speculative-draft-model-path"),
        # An EAGLE3 draft trained for a target of hidden size 96 (the target's is 64).
        make_draft=lambda _: eagle_drafts.tiny_eagle3_draft(
            replace(TP2_EAGLE3_DRAFT, hidden=96, heads=4)
        ),
    ),
    **{
        f"mem-fraction-{f}": Launch(
            {"mem_fraction_static": f}, (f"--mem-fraction-static {float(f)} is outside (0, 1)",)
        )
        for f in (0, 1, 1.5)
    },
    "max-total-tokens-below-a-page": Launch(
        {"max_total_tokens": 8, "page_size": 16},
        ("--max-total-tokens 8 leaves no KV pool with --page-size 16",
         "Pass --max-total-tokens 16 or more"),
    ),
}  # fmt: skip


def error_lines(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if "Error: " in ln and not ln.startswith(" ")]


def assert_refused_by_the_launcher(log: str, row: Launch, draft: Path) -> str:
    """The launcher's one error line is the row's message, raised before any rank existed."""
    lines = error_lines(log)
    assert len(lines) == 1, lines or log[-3000:]  # one message, not one per rank
    message = lines[-1]
    assert message.split(": ", 1)[0].endswith("LaunchCheckError"), message
    for needle in row.expect:
        assert needle.format(draft=draft) in message, (needle, message)
    traceback = log[: log.index(message)]
    assert "in _launch_subprocesses" in traceback, traceback[-3000:]
    assert "check_server_args" in traceback.rsplit("in _launch_subprocesses", 1)[1], traceback
    assert set(rank_log_lines(log)) == {"launcher"}, sorted(rank_log_lines(log))
    return message


def _target_without(key: str, shape: TinyLlamaShape, tmp_path: Path) -> Path:
    """A copy of the tiny target of ``shape`` whose config leaves ``key`` out."""
    target = tmp_path / "target"
    shutil.copytree(llama_family.tiny_llama_target(shape), target)
    config_path = target / "config.json"
    config = json.loads(config_path.read_text())
    del config[key]
    config_path.write_text(json.dumps(config))
    return target


# No draft step: 0.5.13's triton draft decode backend fails on every rank (IndexError, stock
# too); 0.5.23 builds no multi-step backend for it and starts (STARTS).
NO_DRAFT_STEP = {"speculative_num_steps": 0, "speculative_num_draft_tokens": 1}

REFUSED_BY_SGLANG = {
    # 0.5.13.x's KV4 check refuses an FP4 KV cache off CUDA (test_fp4_kv_plans: on a GPU).
    "fp4-kv-on-cpu": Launch(
        live="KV4 is not tested on non-CUDA platforms",
        expect=("KV4 is not tested on non-CUDA platforms", "pass another --kv-cache-dtype"),
        flags={"kv_cache_dtype": "fp4_e2m1"},
        adapters=("sglang_0_5_13",),
        in_ci=False,
    ),
    "unknown-flag": Launch(
        live="unrecognized arguments: --no-such-flag",
        expect=("unrecognized arguments: --no-such-flag",),
        flags={"no_such_flag": True},
    ),
    "target-without-architectures": Launch(
        live="TypeError",
        expect=("has no 'architectures' list",),
        make_target=partial(_target_without, "architectures", llama_family.DEFAULT_TARGET),
    ),
    "draft-path-missing": Launch(
        live="no-such-draft",
        expect=("--speculative-draft-model-path",),
        make_draft=lambda tmp: tmp / "no-such-draft",
    ),
    # No draft path for a Llama target: its checkpoint loads as the draft, with no hot-token map.
    "eagle3-without-draft": Launch(
        live="has no attribute 'hot_token_id'",
        expect=("pass --speculative-draft-model-path an EAGLE3 draft",),
        make_draft=lambda _: None,
    ),
    # Sizes SGLang divides by (measured on 0.5.23: no scheduler info, a modulo by zero).
    "tp-size-0": Launch(
        live="IndexError",
        expect=("--tp-size 0: the launch fails",),
        flags={"tp_size": 0},
        adapters=("sglang_0_5_23",),
    ),
    "page-size-0": Launch(
        live="ZeroDivisionError",
        expect=("--page-size 0: the launch fails",),
        flags={"page_size": 0},
        adapters=("sglang_0_5_23",),
    ),
    "num-steps-0-topk-1": Launch(
        live="IndexError",
        expect=("--speculative-num-steps 1 or more",),
        flags=NO_DRAFT_STEP,
        adapters=("sglang_0_5_13",),
    ),
    # Measured on 0.5.13.post1 and 0.5.23 (odd inputs; live only with SPECINIT_TEST_SLOW=1):
    # every rank fails, in the top-k 1 chain's buffers, resp. the scheduler's request-length
    # assertion (0.5.13.x keeps 5 tokens of the longest request for the output: 6 refused, 7
    # starts; 0.5.23 starts 2).
    "num-steps--1": Launch(
        live="upper bound and lower bound inconsistent",
        expect=("--speculative-num-steps -1",),
        flags={"speculative_num_steps": -1},
        in_ci=False,
    ),
    "context-length--1": Launch(
        live="Memory pool size is too small",
        expect=("pass --context-length",),
        flags={"context_length": -1},
        in_ci=False,
    ),
    "context-length-6": Launch(
        live="Memory pool size is too small",
        expect=("pass --context-length 7 or more",),
        flags={"context_length": 6},
        adapters=("sglang_0_5_13",),
        in_ci=False,
    ),
}


# The fault matrices' launch with nothing wrong, at page 1 and 16; odd launches that start; TP 3,
# whose heads device cpu pads (the planner refuses it on CUDA: test_plan_cli).
STARTS = {
    "intact-eagle3-pair": Launch(in_ci=False),
    "page-size-16": Launch({"page_size": 16}),
    "num-steps-0-topk-1": Launch(NO_DRAFT_STEP, adapters=("sglang_0_5_23",)),
    # 32 heads, ``num_attention_heads`` left out: the config class's default (32) fills it in, as
    # for a Llama-3-8B config with the key deleted.
    "no-num-attention-heads": Launch(
        make_target=partial(
            _target_without,
            "num_attention_heads",
            replace(llama_family.DEFAULT_TARGET, heads=32, head_dim=2),
        )
    ),
    "tp-3-on-cpu": Launch({"tp_size": 3}, in_ci=False),
    # Odd inputs that start (measured on 0.5.13.post1 and 0.5.23): the shortest context each
    # release's scheduler accepts, no chunked prefill, no draft tokens (topk 1 sets them).
    "context-length-7": Launch({"context_length": 7}, in_ci=False),
    "context-length-2": Launch({"context_length": 2}, in_ci=False, adapters=("sglang_0_5_23",)),
    "chunked-prefill-0": Launch({"chunked_prefill_size": 0}, in_ci=False),
    "num-draft-tokens-0": Launch({"speculative_num_draft_tokens": 0}, in_ci=False),
}

# Every table by where its launches end ("ranks": the server refuses on its ranks, after the
# launcher).
TABLES = {
    "launcher": REFUSED,
    "ranks": {
        "weights-leave-no-room": Launch(
            {"mem_fraction_static": 0.02},
            ("leave no room for the KV cache under --mem-fraction-static=0.02",
             "Pass --mem-fraction-static"),
        ),
    },
    "sglang": REFUSED_BY_SGLANG,
    "starts": STARTS,
}  # fmt: skip


def rows_of_this_generation(table: Mapping[str, Launch]) -> list[str]:
    from harness.releases import installed_row

    adapter = getattr(installed_row(), "adapter", None)
    return sorted(name for name, spec in table.items() if adapter in spec.adapters)


# The user property a live-verdict test records (launch, planner's verdict, live verdict) under;
# test/conftest.py prints them as one table after the run.
VERDICT_PROPERTY = "plan_vs_live"


def launch_flags(
    draft: Path | None, *, target: Path | None = None, algorithm: str = ALGORITHM, **flags: Any
) -> list[str]:
    """The live row's ``launch_server`` flags (default: the fault matrices' TP 1 launch)."""
    kwargs = engine.cpu_engine_kwargs(
        target or llama_family.tiny_llama_target(),
        draft_model_path=draft,
        algorithm=algorithm,
        skip_server_warmup=True,
        **{**SPEC_FLAGS, **flags},
    )
    return engine.server_args_to_cli(kwargs)


def plan_verdict(argv: list[str], capacity_bytes: int = engine.DEFAULT_CAPACITY_BYTES) -> Verdict:
    """``plan`` in this process on the launch's flags, for the simulated device."""
    capacity = str(capacity_bytes)
    # The simulated device is empty before the weights load (no CUDA context to allow for).
    return run_cli(["plan", *argv, "--device-memory", capacity, "--pre-load-free-bytes", capacity])


def launch_verdict(spec: Launch, draft: Path | None, target: Path, **flags: Any) -> Verdict:
    """``plan`` on the launch of a table's row (``flags`` on top of the row's)."""
    flags = {**spec.flags, **flags}
    return plan_verdict(launch_flags(draft, target=target, algorithm=spec.algorithm, **flags))


def _label(kwargs: Mapping[str, Any]) -> str:
    """The launch in a few words: algorithm, checkpoints, and every flag the defaults lack."""
    algorithm = kwargs.get("speculative_algorithm")
    draft = kwargs.get("speculative_draft_model_path")
    defaults = engine.cpu_engine_kwargs(
        kwargs["model_path"], draft_model_path=draft, algorithm=algorithm
    )
    models = " + ".join(_checkpoint(path) for path in (kwargs["model_path"], draft) if path)
    changed = [
        f"{key}={value}" if len(str(value)) <= 24 else f"{key}=..."
        for key, value in kwargs.items()
        if key != "skip_server_warmup" and defaults.get(key) != value
    ]
    return " ".join([algorithm or "no-draft", models, *changed])


def _checkpoint(path: str) -> str:
    """A tiny checkpoint's directory name with its shape hash cut to 4 digits."""
    stem, _, digest = Path(path).name.rpartition("-")
    return f"{stem}-{digest[:4]}" if stem and len(digest) == 12 else Path(path).name


def plan_started_launches() -> list[tuple[str, Verdict]]:
    """``plan`` on each launch that came up with the plugin on since the last call: planned."""
    return [
        (_label(kwargs), plan_verdict(engine.server_args_to_cli(kwargs), capacity).assert_plans())
        for kwargs, capacity in drain_started()
    ]


def assert_refusal(planned: Verdict, needles: tuple[str, ...], draft: Path | None = None) -> str:
    """``planned`` is a one-line refusal holding every needle (``{draft}``: the draft's path)."""
    line = planned.refusal_line()
    for needle in needles:
        assert needle.format(draft=draft) in line, (needle, line)
    return line
