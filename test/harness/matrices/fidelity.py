"""The fidelity matrix's rows: SGLang's documented speculative recipes, per release."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sglang_specinit.planner.gpus import GPU_PRESETS

from harness.checkpoints import eagle_drafts, gemma4_mtp, llama_family, mimo_v2_mtp, tiny_configs
from harness.launch.engine import cpu_engine_kwargs, server_args_to_cli

# The suite's EAGLE3 launch uses this draft (a reduced vocabulary: a hot-token map to bind).
from harness.launch.launch_0_5_23 import EAGLE3_DRAFT_VOCAB
from harness.launch.plugin_probe import probe_env
from harness.matrices.fidelity_probe import PHASES_ITSELF

# The device the recipes target, as a named test double: an H100-80GB (nvidia-smi MiB, sm90).
GPU = GPU_PRESETS["H100-80GB"]
# SGLang 0.5.13.post1's flat draft reserve in the automatic fraction, in MiB.
DRAFT_RESERVE_MIB = {"STANDALONE": 6 * 1024, "NGRAM": 0}
DEFAULT_DRAFT_RESERVE_MIB = 4 * 1024
PROBE_TIMEOUT_S = 600

TARGET = "{target}"
DRAFT = "{draft}"

# What every CPU Engine needs whatever the recipe says: cpu_engine_kwargs' own settings, TP 1.
CPU_ENGINE_OVERRIDES: dict[str, Any] = {
    **{
        key: value
        for key, value in cpu_engine_kwargs(TARGET, mem_fraction_static=None).items()
        if key not in ("model_path", "page_size")  # the recipe's own
    },
    "tp_size": 1,
}
# Their draft backend factory has no torch_native entry (Triton backends are built, not run).
TRITON_DRAFT_BACKEND = {"speculative_draft_attention_backend": "triton"}
# A CPU Engine's 256 MiB device is below the automatic fraction's 512 MiB reserve: an explicit
# fraction on CPU (the automatic one is checked in (a) on the H100 double).
CPU_FRACTION = {"mem_fraction_static": 0.5}


@dataclass(frozen=True)
class Row:
    """One documented launch, hub ids replaced by tiny checkpoints of the same architecture."""

    key: str
    recipe: tuple[str, ...]
    target: Callable[[], Path]
    draft: Callable[[], Path] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    # False: a launch the plugin leaves to stock init (stock reserve, one WARNING).
    phased: bool = True
    # The release refuses this command (its message); the plugin must refuse it alike.
    refused: str | None = None
    # CPU Engine: kwargs on top of CPU_ENGINE_OVERRIDES; None with engine_blocker (why not).
    engine: Mapping[str, Any] | None = None
    engine_blocker: str | None = None

    def __post_init__(self) -> None:
        assert (self.engine is None) == bool(self.engine_blocker), f"row {self.key}: why no Engine?"

    @property
    def pathless(self) -> bool:
        """The draft comes from the target's checkpoint (no --speculative-draft-model-path)."""
        return self.draft is None and "NGRAM" not in self.recipe

    def launch_argv(self) -> list[str]:
        """The recipe with local paths."""
        paths = {TARGET: str(self.target())}
        if self.draft is not None:
            paths[DRAFT] = str(self.draft())
        return [paths.get(a, a) for a in self.recipe]


def command(line: str) -> tuple[str, ...]:
    """A launch's flags as the docs print them, split as a shell splits them."""
    return tuple(shlex.split(line))


# The 3 / 1 / 4 draft chain of the MTP usage pages (DeepSeek-V3.2, GLM-4.5, Qwen3-Next, MiMo).
MTP_CHAIN = "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
QWEN3_NEXT_DOCS = command(f"--model {TARGET} --tp 4 {MTP_CHAIN} --speculative-algo NEXTN")
NGRAM_DOCS = command(
    f"--model {TARGET} --speculative-algorithm NGRAM --speculative-num-draft-tokens 16"
    " --speculative-ngram-max-match-window-size 12 --speculative-ngram-max-bfs-breadth 10"
    " --mem-fraction-static 0.7 --cuda-graph-max-bs 8 --log-level warning"
)
NGRAM_CUDA_ONLY = (
    "NGRAM cannot be built on CPU: its worker imports CUDA-only sgl_kernel (0.5.13.x also refuses "
    "it off CUDA: test_workers_ngram.py); the GPU suite launches it"
)
DSA_NEEDS_CUDA = (
    "SGLang cannot start a DeepSeek-V3.2 (DSA) launch on CPU: its DSA defaults read "
    "torch.cuda.get_device_capability()"
)
DEEPSEEK_V3_DOCS = command(
    f"--model-path {TARGET} --speculative-algorithm EAGLE --trust-remote-code --tp 8"
)


def guide_recipe(algorithm: str, steps: int, topk: int, tokens: int, extra: str = "") -> tuple:
    """The speculative-decoding guide's EAGLE-2 / EAGLE-3 / STANDALONE command."""
    return command(
        f"--model {TARGET} --speculative-algorithm {algorithm}"
        f" --speculative-draft-model-path {DRAFT} --speculative-num-steps {steps}"
        f" --speculative-eagle-topk {topk} --speculative-num-draft-tokens {tokens}"
        f" --mem-fraction-static 0.7 --cuda-graph-max-bs 8 {extra} --log-level warning"
    )


# Sources: the speculative-decoding guide (docs/advanced_features/speculative_decoding.md), the
# docs/basic_usage pages, the docs_new cookbook, SGLang's own DFLASH server test.
ROWS_0_5_13: tuple[Row, ...] = (
    # The guide's EAGLE-2 command (its Llama-2 pair: the same LlamaForCausalLM(Eagle) classes).
    Row(
        key="llama31-eagle",
        recipe=guide_recipe("EAGLE", 3, 4, 16),
        target=llama_family.tiny_llama_target,
        draft=eagle_drafts.tiny_eagle_draft,
        engine=TRITON_DRAFT_BACKEND,
    ),
    # The guide's EAGLE-3 command (Meta-Llama-3.1-8B-Instruct + its EAGLE3 draft).
    Row(
        key="llama31-eagle3",
        recipe=guide_recipe("EAGLE3", 3, 4, 16, "--dtype float16"),
        target=llama_family.tiny_llama_target,
        draft=eagle_drafts.tiny_eagle3_draft,
        engine=TRITON_DRAFT_BACKEND,
    ),
    # Cookbook GPT-OSS.mdx 4.2.3 (a bf16 gpt-oss: no MXFP4 kernels here). On CPU 0.5.13.post1
    # accepts only triton (among CPU-built backends) for GptOssForCausalLM: built, never run.
    Row(
        key="gpt-oss-eagle3",
        recipe=command(
            f"--model-path {TARGET} --speculative-algorithm EAGLE3"
            f" --speculative-draft-model-path {DRAFT} --tp 2"
        ),
        target=lambda: tiny_configs.tiny_checkpoint("gpt-oss"),
        draft=eagle_drafts.tiny_eagle3_draft,
        engine={**TRITON_DRAFT_BACKEND, **CPU_FRACTION, "attention_backend": "triton"},
    ),
    # The guide's STANDALONE command (Qwen2.5-7B + Qwen2.5-1.5B).
    Row(
        key="standalone",
        recipe=guide_recipe("STANDALONE", 4, 2, 7),
        target=llama_family.tiny_qwen2,
        draft=lambda: llama_family.tiny_qwen2(llama_family.DEFAULT_STANDALONE_DRAFT),
        engine=TRITON_DRAFT_BACKEND,
    ),
    # SGLang's DFLASH server test (test_dflash.py, TestDFlashServerBase); the guide has no
    # DFLASH command. On CPU: torch_native attention (flashinfer is CUDA-only).
    Row(
        key="dflash",
        recipe=command(
            f"--model-path {TARGET} --trust-remote-code --attention-backend flashinfer"
            f" --speculative-algorithm DFLASH --speculative-draft-model-path {DRAFT}"
            " --page-size 1 --max-running-requests 64 --mem-fraction-static 0.7"
            f" --cuda-graph-bs {' '.join(map(str, range(1, 65)))} --disable-overlap-schedule"
        ),
        target=llama_family.tiny_llama_target,
        draft=eagle_drafts.tiny_dflash_draft,
        engine=TRITON_DRAFT_BACKEND,
    ),
    # The guide's NGRAM command verbatim, and without the flag 0.5.13.post1 does not have.
    Row(
        key="ngram-docs",
        recipe=NGRAM_DOCS,
        target=llama_family.tiny_qwen2,
        refused="unrecognized arguments: --speculative-ngram-max-match-window-size 12",
        engine_blocker=NGRAM_CUDA_ONLY,
    ),
    Row(
        key="ngram",
        recipe=NGRAM_DOCS[:6] + NGRAM_DOCS[8:],  # without the window-size flag and its value
        target=llama_family.tiny_qwen2,
        engine_blocker=NGRAM_CUDA_ONLY,
    ),
    # docs/basic_usage/deepseek_v3.md, MTP command (DeepSeek-V3-0324).
    Row(
        key="deepseek-v3-mtp",
        recipe=DEEPSEEK_V3_DOCS,
        target=lambda: tiny_configs.tiny_checkpoint("deepseek-v3"),
        engine={**TRITON_DRAFT_BACKEND, **CPU_FRACTION},
    ),
    # docs/basic_usage/deepseek_v32.md, MTP command (DeepSeek-V3.2-Exp).
    Row(
        key="deepseek-v32-mtp",
        recipe=command(
            f"--model {TARGET} --tp 8 --dp 8 --enable-dp-attention --speculative-algorithm EAGLE"
            f" {MTP_CHAIN}"
        ),
        target=lambda: tiny_configs.tiny_config_dir("deepseek-v32"),
        engine_blocker=DSA_NEEDS_CUDA,
    ),
    # docs/basic_usage/glm45.md, MTP command (GLM-4.6-FP8; bf16 here: no FP8 block quantization).
    Row(
        key="glm45-mtp",
        recipe=command(
            f"--model-path {TARGET} --tp-size 8 --tool-call-parser glm45 --reasoning-parser glm45"
            f" --speculative-algorithm EAGLE {MTP_CHAIN} --mem-fraction-static 0.9"
            " --served-model-name glm-4.6-fp8 --enable-custom-logit-processor"
        ),
        target=lambda: tiny_configs.tiny_checkpoint("glm4-moe"),
        engine=TRITON_DRAFT_BACKEND,
    ),
    # docs/basic_usage/qwen3.md, Qwen3-Next MTP command verbatim (spelled --speculative-algo),
    # then with --disable-radix-cache, which 0.5.13.post1 requires (the other remedy its message
    # names, --mamba-scheduler-strategy extra_buffer, asserts a CUDA platform).
    Row(
        key="qwen3-next-docs",
        recipe=QWEN3_NEXT_DOCS,
        target=lambda: tiny_configs.tiny_config_dir("qwen3-next"),
        refused=(
            "Speculative decoding for Qwen3NextForCausalLM is not compatible with radix cache "
            "when using --mamba-scheduler-strategy no_buffer"
        ),
        engine_blocker="refused by SGLang 0.5.13.post1 (see row qwen3-next-nextn)",
    ),
    Row(
        key="qwen3-next-nextn",
        recipe=(*QWEN3_NEXT_DOCS, "--disable-radix-cache"),
        target=lambda: tiny_configs.tiny_config_dir("qwen3-next"),
        engine_blocker="SGLang's Qwen3Next gated-delta-net layer asks for the CUDA device",
    ),
    # Cookbook MiMo-V2-Flash.mdx (mimo-v2-flash-deployment.jsx), MTP-only selection.
    Row(
        key="mimo-v2-flash",
        recipe=command(
            f"--model-path {TARGET} --trust-remote-code --tp-size 8 --speculative-algorithm EAGLE"
            f" {MTP_CHAIN} --enable-multi-layer-eagle"
        ),
        env={"SGLANG_ENABLE_SPEC_V2": "1"},
        target=mimo_v2_mtp.tiny_mimo_v2_target,
        engine={**TRITON_DRAFT_BACKEND, **CPU_FRACTION},
    ),
    # Cookbook Gemma4.mdx section 4, Gemma 4 E2B + MTP (a text-only Gemma4ForCausalLM target:
    # E2B is multimodal). On CPU 0.5.13.post1 accepts triton for Gemma 4: built, never run.
    Row(
        key="gemma4-frozen-kv-mtp",
        recipe=command(
            f"--model-path {TARGET} --speculative-algorithm NEXTN"
            f" --speculative-draft-model-path {DRAFT} --speculative-num-steps 5"
            " --speculative-num-draft-tokens 6 --speculative-eagle-topk 1"
            " --mem-fraction-static 0.85"
        ),
        target=gemma4_mtp.tiny_gemma4_target,
        draft=gemma4_mtp.tiny_gemma4_assistant,
        engine={"attention_backend": "triton"},
    ),
    # Not phased: deepseek_v3.md's MTP command on a DeepSeek-V3.2 checkpoint plus
    # --enable-hisparse and the --disable-radix-cache its check requires.
    Row(
        key="deepseek-v32-hisparse",
        recipe=(*DEEPSEEK_V3_DOCS, "--enable-hisparse", "--disable-radix-cache"),
        target=lambda: tiny_configs.tiny_config_dir("deepseek-v32"),
        phased=False,
        # The scheduler-side decision is checked on SGLang's own Scheduler.init_model_worker.
        engine_blocker=DSA_NEEDS_CUDA + "; HiSparse's flashmla backends are CUDA-only too",
    ),
    # Not phased: deepseek_v32.md's MTP flags (3/1/4, required for V4) on a DeepSeek-V4 checkpoint.
    Row(
        key="deepseek-v4-mtp",
        recipe=command(
            f"--model-path {TARGET} --speculative-algorithm EAGLE {MTP_CHAIN}"
            " --trust-remote-code --tp 8"
        ),
        target=lambda: tiny_configs.tiny_config_dir("deepseek-v4"),
        phased=False,
        # The scheduler-side decision is checked on SGLang's own Scheduler.init_model_worker.
        engine_blocker="DeepSeek-V4's compressed KV pools and kernels are CUDA-only",
    ),
)

# 0.5.23 splits both graph flags per phase (and refuses the old ones as ambiguous: rows
# eagle3-docs, dflash-docs); the recipes' values bound the decode graphs.
RESPELLED = {
    "--cuda-graph-max-bs": "--cuda-graph-max-bs-decode",
    "--cuda-graph-bs": "--cuda-graph-bs-decode",
}
_eagle3_draft = partial(eagle_drafts.tiny_eagle3_draft, draft_vocab=EAGLE3_DRAFT_VOCAB)


def _ambiguous(key: str, new_key: str, flag: str, **changes: Any) -> Row:
    """The 0.5.13.post1 row ``key`` verbatim, whose graph ``flag`` 0.5.23's parser refuses."""
    return dataclasses.replace(
        next(row for row in ROWS_0_5_13 if row.key == key),
        key=new_key,
        refused=f"ambiguous option: {flag} could match {RESPELLED[flag]}",
        engine=None,
        engine_blocker=f"refused by sglang 0.5.23's parser (see row {key})",
        **changes,
    )


# How 0.5.23 takes a 0.5.13.post1 row besides the graph flags' spelling (key: changed fields).
CHANGES_0_5_23: dict[str, dict[str, Any]] = {
    "llama31-eagle3": {"draft": _eagle3_draft},
    "gpt-oss-eagle3": {"draft": _eagle3_draft},
    "dflash": {
        "engine": None,
        "engine_blocker": "0.5.23 refuses DFLASH on CPU (not supported by CpuSRTPlatform)",
    },
    # 0.5.23 picks --mamba-scheduler-strategy extra_buffer and asserts the platform snapshots
    # Mamba state (the H100 double covers memory and capability, not that); without the radix
    # cache (row qwen3-next-nextn) it needs no snapshots.
    "qwen3-next-docs": {
        "refused": "extra_buffer requires platform support for Mamba cache state snapshots",
        "engine_blocker": "refused by sglang 0.5.23 here (see row qwen3-next-nextn)",
    },
    "deepseek-v32-hisparse": {"engine_blocker": "stock sizing (one WARNING); " + DSA_NEEDS_CUDA},
    # 0.5.23's CPU rope refuses V4's SWA-only layers, its V4 KV pool is FP8-only (docs/limits.md);
    # the plugin's V4 sizing hook runs on 0.5.23's configurators instead (test_dsv4_sizing_hook).
    "deepseek-v4-mtp": {"engine_blocker": "0.5.23 cannot build DeepSeek-V4 on CPU"},
}
# Every 0.5.13.post1 row with the graph flags as 0.5.23 spells them, and two recipes verbatim.
ROWS_0_5_23: tuple[Row, ...] = (
    _ambiguous("llama31-eagle3", "eagle3-docs", "--cuda-graph-max-bs", draft=_eagle3_draft),
    _ambiguous("dflash", "dflash-docs", "--cuda-graph-bs"),
    *(
        dataclasses.replace(
            row,
            recipe=tuple(RESPELLED.get(a, a) for a in row.recipe),
            **CHANGES_0_5_23.get(row.key, {}),
        )
        for row in ROWS_0_5_13
    ),
)


ROWS = ROWS_0_5_13 if PHASES_ITSELF else ROWS_0_5_23


def probe_request(rows: tuple[Row, ...] = ROWS) -> dict[str, Any]:
    """The probe's request: the recipes on the GPU double, plus (0.5.13.x) each Engine row's."""
    launches = []
    for row in rows:
        # Unphased 0.5.13.x rows: the (hooked) Scheduler.init_model_worker up to its first call.
        env, check = dict(row.env), not row.phased and PHASES_ITSELF
        argv = [*row.launch_argv(), "--device", "cuda"]  # the device the recipe targets
        launches.append({"name": row.key, "argv": argv, "env": env, "scheduler_check": check})
        if row.engine is not None and PHASES_ITSELF:
            argv = server_args_to_cli(engine_kwargs(row))
            cpu = {"name": f"{row.key}@cpu", "argv": argv, "env": env, "cpu_engine": True}
            launches.append({**cpu, "modes": ["off"]})
    return {"capacity_mib": GPU.total_mib, "capability": divmod(GPU.sm, 10), "launches": launches}


def run_probe(request: dict[str, Any], work_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Run the probe on every launch, plugin on and off: ``{(name, mode): result}``."""
    work_dir.mkdir(parents=True, exist_ok=True)
    request_path = work_dir / "request.json"
    request_path.write_text(json.dumps(request, indent=1))
    out_dir = work_dir / "results"
    test_dir = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (test_dir, os.environ.get("PYTHONPATH", "")) if p)
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env = probe_env(PYTHONPATH=path, TOKENIZERS_PARALLELISM="false", **offline)
    env.pop("SGLANG_USE_CPU_ENGINE", None)
    log = work_dir / "probe.log"
    probe = [sys.executable, "-m", "harness.matrices.fidelity_probe", str(request_path), out_dir]
    with open(log, "wb") as sink:
        proc = subprocess.run(
            probe, env=env, stdout=sink, stderr=subprocess.STDOUT, timeout=PROBE_TIMEOUT_S
        )
    found = [json.loads(path.read_text()) for path in sorted(out_dir.glob("*.json"))]
    results = {(data["name"], data["mode"]): data for data in found}
    if proc.returncode != 0 or not results:
        tail = log.read_text(errors="replace")[-4000:]
        raise RuntimeError(f"fidelity probe failed (rc={proc.returncode})\n{tail}")
    return results


def server_args_differences(
    on: dict[str, Any], off: dict[str, Any], part: str = "server_args"
) -> dict[str, tuple]:
    """``{field: (plugin on, plugin off)}`` for every ServerArgs field of ``part`` that differs."""
    a, b = on[part], off[part]
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def parsed_recipe(argv: list[str]) -> dict[str, Any]:
    """The ``ServerArgs`` fields ``argv`` sets as SGLang's parser maps them, unresolved."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    from harness.matrices.fidelity_probe import input_fields

    unresolved: type = ServerArgs
    if PHASES_ITSELF:

        class UnresolvedServerArgs(ServerArgs):
            def __post_init__(self) -> None:  # 0.5.13.x resolves here
                pass

        unresolved = UnresolvedServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    parsed = input_fields(unresolved.from_cli_args(parser.parse_args(argv)))
    model = ["--model-path", parsed["model_path"]]
    baseline = input_fields(unresolved.from_cli_args(parser.parse_args(model)))
    return {k: v for k, v in parsed.items() if k == "model_path" or v != baseline.get(k)}


def engine_kwargs(row: Row) -> dict[str, Any]:
    """``sglang.Engine`` kwargs of the row's recipe on device cpu (model path included)."""
    if row.engine is None:
        raise ValueError(f"row {row.key} has no CPU Engine: {row.engine_blocker}")
    kwargs = parsed_recipe(row.launch_argv())
    kwargs.update(CPU_ENGINE_OVERRIDES)
    kwargs.update(row.engine)
    return kwargs


def plan_for_server(
    row: Row, kwargs: Mapping[str, Any], memory: Mapping[str, Any], capacity: int
) -> dict[str, Any]:
    """``plan --json`` on the Engine's flags, environment and measured device numbers."""
    measured = (
        f"--device-memory {capacity} --pre-load-free-bytes {memory['pre_load_free_bytes']}"
        f" --resident-bytes {memory['resident_bytes']}"
    )
    argv = ["plan", "--json", *server_args_to_cli(kwargs), *shlex.split(measured)]
    if not PHASES_ITSELF:
        from harness.launch.release_suite import run_planner

        return run_planner([sys.executable, "-m", "sglang_specinit.planner.cli", *argv], row.env)
    from harness.planner_cli import run_cli

    planned = run_cli(argv, row.env)
    assert planned.code == 0, f"plan exited {planned.code}: {planned.err.strip()[-3000:]}"
    return json.loads(planned.out)
