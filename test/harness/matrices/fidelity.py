"""The fidelity matrix's rows (SGLang's documented speculative recipes, flag for flag, as each
generation takes them) and per-row machinery."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglang_specinit.planner.gpus import GPU_PRESETS

from harness.checkpoints import eagle_drafts, gemma4_mtp, llama_family, mimo_v2_mtp, tiny_configs

# The suite's EAGLE3 launch uses this draft (a reduced vocabulary: a hot-token map to bind).
from harness.launch.launch_0_5_23 import EAGLE3_DRAFT_VOCAB
from harness.launch.sglang_release import graphs_off_kwargs
from harness.matrices.fidelity_probe import PHASES_ITSELF

# The device the recipes target, as a named test double: total memory (nvidia-smi MiB) and
# compute capability (sm90) of an H100-80GB.
GPU = GPU_PRESETS["H100-80GB"]
GPU_CAPABILITY = (9, 0)
# SGLang 0.5.13.post1's flat draft reserve in the automatic fraction, in MiB.
DRAFT_RESERVE_MIB = {"STANDALONE": 6 * 1024, "NGRAM": 0}
DEFAULT_DRAFT_RESERVE_MIB = 4 * 1024
PROBE_TIMEOUT_S = 600
PROBE_MODULE = "harness.matrices.fidelity_probe"

TARGET = "{target}"
DRAFT = "{draft}"

# What every CPU Engine needs whatever the recipe says (harness/launch/engine.py).
CPU_ENGINE_OVERRIDES: dict[str, Any] = {
    "device": "cpu",
    "attention_backend": "torch_native",
    **graphs_off_kwargs(),
    "grammar_backend": "none",
    "tp_size": 1,
    "log_level": "info",
    "random_seed": 0,
}
# Their draft backend factory has no torch_native entry (Triton backends are built, not run).
TRITON_DRAFT_BACKEND = {"speculative_draft_attention_backend": "triton"}
# The simulated device of a CPU Engine is 256 MiB; SGLang's automatic fraction reserves at least
# 512 MiB, so a recipe with an automatic fraction gets an explicit one on CPU.
CPU_FRACTION = {"mem_fraction_static": 0.5}
CPU_FRACTION_CHANGE = (
    "--mem-fraction-static 0.5 on CPU: the automatic fraction reserves >= 512 MiB of the 256 MiB "
    "simulated device (the automatic fraction itself is checked in (a) on the H100 double)"
)
HUB_TO_TINY = "hub ids -> local tiny checkpoints of the same architecture"
DEVICE_CUDA = "--device cuda added: a GPU recipe, and no GPU to detect here"


@dataclass(frozen=True)
class Row:
    """One documented launch, its tiny stand-ins, and what could not be kept."""

    key: str
    title: str
    source: str
    recipe: tuple[str, ...]
    target: Callable[[], Path]
    draft: Callable[[], Path] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    changes: tuple[str, ...] = (HUB_TO_TINY, DEVICE_CUDA)
    # False: a launch the plugin leaves to stock init (stock reserve, one WARNING).
    phased: bool = True
    # The release refuses this command (its message); the plugin must refuse it alike.
    refused: str | None = None
    # The draft comes from the target's checkpoint (no --speculative-draft-model-path).
    pathless: bool = False
    # CPU Engine: kwargs on top of CPU_ENGINE_OVERRIDES, and why; None with engine_blocker.
    engine: Mapping[str, Any] | None = None
    engine_changes: tuple[str, ...] = ()
    engine_blocker: str | None = None
    # Run the (hooked) Scheduler.init_model_worker up to its first call (unphased rows).
    scheduler_check: bool = False

    def paths(self) -> dict[str, str]:
        out = {TARGET: str(self.target())}
        if self.draft is not None:
            out[DRAFT] = str(self.draft())
        return out

    def launch_argv(self) -> list[str]:
        """The recipe with local paths (what ``launch_server`` gets on the CPU Engine's side)."""
        paths = self.paths()
        return [paths.get(a, a) for a in self.recipe]

    def argv(self) -> list[str]:
        """The recipe with local paths plus ``--device cuda`` (the device it targets)."""
        return [*self.launch_argv(), "--device", "cuda"]


EAGLE_DOC = "docs/advanced_features/speculative_decoding.md"
# The 3 / 1 / 4 draft chain the MTP usage pages (DeepSeek-V3.2, GLM-4.5,
# Qwen3-Next, MiMo-V2-Flash) spell out.
MTP_CHAIN_FLAGS = (
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
)  # fmt: skip
QWEN3_NEXT_DOCS = (
    "--model", TARGET,
    "--tp", "4",
    *MTP_CHAIN_FLAGS,
    "--speculative-algo", "NEXTN",
)  # fmt: skip
NGRAM_DOCS = (
    "--model", TARGET,
    "--speculative-algorithm", "NGRAM",
    "--speculative-num-draft-tokens", "16",
    "--speculative-ngram-max-match-window-size", "12",
    "--speculative-ngram-max-bfs-breadth", "10",
    "--mem-fraction-static", "0.7",
    "--cuda-graph-max-bs", "8",
    "--log-level", "warning",
)  # fmt: skip
NGRAM_CUDA_ONLY = (
    "NGRAM cannot be built on CPU (its worker imports CUDA-only sgl_kernel, and SGLang refuses "
    "it off CUDA: test_workers_ngram.py); the GPU suite launches it"
)
DSA_NEEDS_CUDA = (
    "SGLang cannot start a DeepSeek-V3.2 (DSA) launch on CPU: its DSA defaults read "
    "torch.cuda.get_device_capability()"
)
DEEPSEEK_V3_DOCS = (
    "--model-path", TARGET,
    "--speculative-algorithm", "EAGLE",
    "--trust-remote-code",
    "--tp", "8",
)  # fmt: skip


def eagle_guide_recipe(algorithm: str, *extra: str) -> tuple[str, ...]:
    """The speculative-decoding guide's EAGLE-2 / EAGLE-3 commands: the same flags but the
    algorithm (EAGLE-3's adds ``--dtype float16``)."""
    return (
        "--model", TARGET,
        "--speculative-algorithm", algorithm,
        "--speculative-draft-model-path", DRAFT,
        "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "4",
        "--speculative-num-draft-tokens", "16",
        "--mem-fraction-static", "0.7",
        "--cuda-graph-max-bs", "8",
        *extra,
        "--log-level", "warning",
    )  # fmt: skip


ROWS_0_5_13: tuple[Row, ...] = (
    Row(
        key="llama31-eagle",
        title="Llama-3.1 + EAGLE",
        source=(
            f"{EAGLE_DOC}, EAGLE-2 command (Llama-2-7b-chat + sglang-EAGLE-llama2-chat-7B). SGLang "
            "documents no Llama-3.1 EAGLE-2 pair; the same LlamaForCausalLM + "
            "LlamaForCausalLMEagle pair stands in"
        ),
        recipe=eagle_guide_recipe("EAGLE"),
        target=llama_family.tiny_llama_target,
        draft=eagle_drafts.tiny_eagle_draft,
        engine=TRITON_DRAFT_BACKEND,
    ),
    Row(
        key="llama31-eagle3",
        title="Llama-3.1 + EAGLE3",
        source=f"{EAGLE_DOC}, EAGLE-3 command (Meta-Llama-3.1-8B-Instruct + its EAGLE3 draft)",
        recipe=eagle_guide_recipe("EAGLE3", "--dtype", "float16"),
        target=llama_family.tiny_llama_target,
        draft=eagle_drafts.tiny_eagle3_draft,
        engine=TRITON_DRAFT_BACKEND,
    ),
    Row(
        key="gpt-oss-eagle3",
        title="gpt-oss + EAGLE3",
        source="docs_new cookbook GPT-OSS.mdx 4.2.3 (gpt-oss-120b + EAGLE3-gpt-oss-120b-bf16)",
        recipe=(
            "--model-path", TARGET,
            "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", DRAFT,
            "--tp", "2",
        ),  # fmt: skip
        target=lambda: tiny_configs.tiny_checkpoint("gpt-oss"),
        draft=eagle_drafts.tiny_eagle3_draft,
        changes=(HUB_TO_TINY + " (a bf16 gpt-oss: no MXFP4 kernels here)", DEVICE_CUDA),
        engine={**TRITON_DRAFT_BACKEND, **CPU_FRACTION, "attention_backend": "triton"},
        engine_changes=(
            CPU_FRACTION_CHANGE,
            "--attention-backend triton on CPU: 0.5.13.post1 accepts only triton/trtllm_mha/"
            "fa3/fa4/ascend/intel_amx/intel_xpu/aiter for GptOssForCausalLM (built, never "
            "launched)",
        ),
    ),
    Row(
        key="standalone",
        title="STANDALONE (Qwen2.5-7B + Qwen2.5-1.5B)",
        source=f"{EAGLE_DOC}, STANDALONE command",
        recipe=(
            "--model", TARGET,
            "--speculative-algorithm", "STANDALONE",
            "--speculative-draft-model-path", DRAFT,
            "--speculative-num-steps", "4",
            "--speculative-eagle-topk", "2",
            "--speculative-num-draft-tokens", "7",
            "--mem-fraction-static", "0.7",
            "--cuda-graph-max-bs", "8",
            "--log-level", "warning",
        ),  # fmt: skip
        target=llama_family.tiny_qwen2,
        draft=lambda: llama_family.tiny_qwen2(llama_family.DEFAULT_QWEN2_DRAFT),
        engine=TRITON_DRAFT_BACKEND,
    ),
    Row(
        key="dflash",
        title="DFLASH (Llama-3.1-8B + DFlash draft)",
        source=(
            "SGLang's DFLASH server test (test/registered/spec/dflash/test_dflash.py, "
            "TestDFlashServerBase launch args); the speculative-decoding guide has no DFLASH "
            "command, the one cookbook cell (Laguna-XS-2.1) is a hybrid-SWA MoE target"
        ),
        recipe=(
            "--model-path", TARGET,
            "--trust-remote-code",
            "--attention-backend", "flashinfer",
            "--speculative-algorithm", "DFLASH",
            "--speculative-draft-model-path", DRAFT,
            "--page-size", "1",
            "--max-running-requests", "64",
            "--mem-fraction-static", "0.7",
            "--cuda-graph-bs",
            *[str(i) for i in range(1, 65)],
            "--disable-overlap-schedule",
        ),  # fmt: skip
        target=llama_family.tiny_llama_target,
        draft=eagle_drafts.tiny_dflash_draft,
        engine=TRITON_DRAFT_BACKEND,
        engine_changes=("--attention-backend torch_native on CPU (flashinfer is CUDA-only)",),
    ),
    Row(
        key="ngram-docs",
        title="NGRAM, the guide's command verbatim",
        source=f"{EAGLE_DOC}, NGRAM command",
        recipe=NGRAM_DOCS,
        target=llama_family.tiny_qwen2,
        refused="unrecognized arguments: --speculative-ngram-max-match-window-size 12",
        engine_blocker=NGRAM_CUDA_ONLY,
    ),
    Row(
        key="ngram",
        title="NGRAM (Qwen2.5-7B)",
        source=f"{EAGLE_DOC}, NGRAM command without the flag 0.5.13.post1 does not have",
        recipe=tuple(
            a
            for i, a in enumerate(NGRAM_DOCS)
            if a != "--speculative-ngram-max-match-window-size"
            and NGRAM_DOCS[i - 1] != "--speculative-ngram-max-match-window-size"
        ),
        target=llama_family.tiny_qwen2,
        changes=(
            HUB_TO_TINY,
            DEVICE_CUDA,
            "--speculative-ngram-max-match-window-size 12 dropped: 0.5.13.post1 has no such "
            "flag (row ngram-docs)",
        ),
        engine_blocker=NGRAM_CUDA_ONLY,
    ),
    Row(
        key="deepseek-v3-mtp",
        title="DeepSeek-V3/R1 MTP (no draft path)",
        source="docs/basic_usage/deepseek_v3.md, MTP command (DeepSeek-V3-0324)",
        recipe=DEEPSEEK_V3_DOCS,
        target=lambda: tiny_configs.tiny_checkpoint("deepseek-v3"),
        pathless=True,
        engine={**TRITON_DRAFT_BACKEND, **CPU_FRACTION},
        engine_changes=(CPU_FRACTION_CHANGE,),
    ),
    Row(
        key="deepseek-v32-mtp",
        title="DeepSeek-V3.2 MTP (no draft path)",
        source="docs/basic_usage/deepseek_v32.md, MTP command (DeepSeek-V3.2-Exp)",
        recipe=(
            "--model", TARGET,
            "--tp", "8",
            "--dp", "8",
            "--enable-dp-attention",
            "--speculative-algorithm", "EAGLE",
            *MTP_CHAIN_FLAGS,
        ),  # fmt: skip
        target=lambda: tiny_configs.tiny_config_dir("deepseek-v32"),
        pathless=True,
        engine_blocker=DSA_NEEDS_CUDA,
    ),
    Row(
        key="glm45-mtp",
        title="GLM-4.5/4.6 MTP (no draft path)",
        source="docs/basic_usage/glm45.md, MTP command (GLM-4.6-FP8)",
        recipe=(
            "--model-path", TARGET,
            "--tp-size", "8",
            "--tool-call-parser", "glm45",
            "--reasoning-parser", "glm45",
            "--speculative-algorithm", "EAGLE",
            *MTP_CHAIN_FLAGS,
            "--mem-fraction-static", "0.9",
            "--served-model-name", "glm-4.6-fp8",
            "--enable-custom-logit-processor",
        ),  # fmt: skip
        target=lambda: tiny_configs.tiny_checkpoint("glm4-moe"),
        changes=(HUB_TO_TINY + " (bf16: no FP8 block quantization here)", DEVICE_CUDA),
        pathless=True,
        engine=TRITON_DRAFT_BACKEND,
    ),
    Row(
        key="qwen3-next-docs",
        title="Qwen3-Next NEXTN, the usage page's command verbatim",
        source="docs/basic_usage/qwen3.md, Qwen3-Next MTP command (spelled --speculative-algo)",
        recipe=QWEN3_NEXT_DOCS,
        target=lambda: tiny_configs.tiny_config_dir("qwen3-next"),
        refused=(
            "Speculative decoding for Qwen3NextForCausalLM is not compatible with radix cache "
            "when using --mamba-scheduler-strategy no_buffer"
        ),
        pathless=True,
        engine_blocker="refused by SGLang 0.5.13.post1 (see row qwen3-next-nextn)",
    ),
    Row(
        key="qwen3-next-nextn",
        title="Qwen3-Next NEXTN (path-less)",
        source=(
            "docs/basic_usage/qwen3.md, Qwen3-Next MTP command, plus --disable-radix-cache, "
            "which 0.5.13.post1 requires"
        ),
        recipe=(*QWEN3_NEXT_DOCS, "--disable-radix-cache"),
        target=lambda: tiny_configs.tiny_config_dir("qwen3-next"),
        changes=(
            HUB_TO_TINY,
            DEVICE_CUDA,
            "--disable-radix-cache added: 0.5.13.post1 refuses the verbatim command (row "
            "qwen3-next-docs); the remedy its message names (--mamba-scheduler-strategy "
            "extra_buffer) asserts a CUDA platform, the other one is what SGLang itself does on "
            "ROCm (disable the radix cache)",
        ),
        pathless=True,
        engine_blocker=(
            "SGLang cannot build Qwen3NextForCausalLM on CPU (its gated-delta-net layer asks "
            "for the CUDA device); the planner does not price the mamba state"
        ),
    ),
    Row(
        key="mimo-v2-flash",
        title="MiMo-V2-Flash (multi-layer EAGLE, path-less)",
        source=(
            "docs_new cookbook MiMo-V2-Flash.mdx (mimo-v2-flash-deployment.jsx), MTP-only selection"
        ),
        recipe=(
            "--model-path", TARGET,
            "--trust-remote-code",
            "--tp-size", "8",
            "--speculative-algorithm", "EAGLE",
            *MTP_CHAIN_FLAGS,
            "--enable-multi-layer-eagle",
        ),  # fmt: skip
        env={"SGLANG_ENABLE_SPEC_V2": "1"},
        target=mimo_v2_mtp.tiny_mimo_v2_target,
        pathless=True,
        engine={**TRITON_DRAFT_BACKEND, **CPU_FRACTION},
        engine_changes=(CPU_FRACTION_CHANGE,),
    ),
    Row(
        key="gemma4-frozen-kv-mtp",
        title="Gemma-4 frozen-KV MTP (assistant draft)",
        source="docs_new cookbook Gemma4.mdx section 4, Gemma 4 E2B + MTP command",
        recipe=(
            "--model-path", TARGET,
            "--speculative-algorithm", "NEXTN",
            "--speculative-draft-model-path", DRAFT,
            "--speculative-num-steps", "5",
            "--speculative-num-draft-tokens", "6",
            "--speculative-eagle-topk", "1",
            "--mem-fraction-static", "0.85",
        ),  # fmt: skip
        target=gemma4_mtp.tiny_gemma4_target,
        draft=gemma4_mtp.tiny_gemma4_assistant,
        changes=(
            HUB_TO_TINY + " (a text-only Gemma4ForCausalLM target; E2B is multimodal)",
            DEVICE_CUDA,
        ),
        engine={"attention_backend": "triton"},
        engine_changes=(
            "--attention-backend triton on CPU: 0.5.13.post1 accepts only trtllm_mha/triton/"
            "intel_xpu for Gemma 4 (built, never launched)",
        ),
    ),
    Row(
        key="deepseek-v32-hisparse",
        title="Not phased: DeepSeek-V3.2 MTP with --enable-hisparse",
        source=(
            "docs/basic_usage/deepseek_v3.md MTP command on a DeepSeek-V3.2 checkpoint, plus "
            "--enable-hisparse and the --disable-radix-cache SGLang's hisparse check requires"
        ),
        recipe=(*DEEPSEEK_V3_DOCS, "--enable-hisparse", "--disable-radix-cache"),
        target=lambda: tiny_configs.tiny_config_dir("deepseek-v32"),
        pathless=True,
        phased=False,
        scheduler_check=True,
        engine_blocker=(
            DSA_NEEDS_CUDA + "; HiSparse also needs the CUDA-only flashmla_sparse/flashmla_kv "
            "backends. The scheduler-side decision is checked on SGLang's own "
            "Scheduler.init_model_worker"
        ),
    ),
    Row(
        key="deepseek-v4-mtp",
        title="Not phased: DeepSeek-V4 MTP",
        source=(
            "docs/basic_usage/deepseek_v32.md MTP flags (3/1/4, which 0.5.13.post1 requires for "
            "DeepSeek-V4) on a DeepSeek-V4 checkpoint"
        ),
        recipe=(
            "--model-path", TARGET,
            "--speculative-algorithm", "EAGLE",
            *MTP_CHAIN_FLAGS,
            "--trust-remote-code",
            "--tp", "8",
        ),  # fmt: skip
        target=lambda: tiny_configs.tiny_config_dir("deepseek-v4"),
        pathless=True,
        phased=False,
        scheduler_check=True,
        engine_blocker=(
            "DeepSeek-V4's compressed KV pools and kernels are CUDA-only; the scheduler-side "
            "decision is checked on SGLang's own Scheduler.init_model_worker"
        ),
    ),
)
ROWS_BY_KEY = {row.key: row for row in ROWS_0_5_13}

GRAPH_FLAG_CHANGE = (
    "--cuda-graph-max-bs / --cuda-graph-bs spelled --cuda-graph-max-bs-decode / "
    "--cuda-graph-bs-decode: 0.5.23 refuses the old flags as ambiguous (rows eagle3-docs, "
    "dflash-docs)"
)
DSA_NEEDS_CUDA_0523 = (
    "0.5.23 cannot resolve a DeepSeek-V3.2 (DSA) launch on CPU: its DSA defaults read "
    "torch.cuda.get_device_capability()"
)


# 0.5.23 splits both graph flags per phase; the recipes' values bound the decode graphs.
RESPELLED = {
    "--cuda-graph-max-bs": "--cuda-graph-max-bs-decode",
    "--cuda-graph-bs": "--cuda-graph-bs-decode",
}


def _from_0513(key: str, **changes: Any) -> Row:
    """The 0.5.13.post1 row ``key`` with the guide's graph flag as 0.5.23 spells it."""
    row = ROWS_BY_KEY[key]
    recipe = tuple(RESPELLED.get(a, a) for a in row.recipe)
    notes = row.changes + ((GRAPH_FLAG_CHANGE,) if recipe != row.recipe else ())
    # (The scheduler check is of 0.5.13.x's phased init.)
    fields = {
        "recipe": recipe,
        "changes": notes,
        "refused": None,
        "scheduler_check": False,
        **changes,
    }
    return dataclasses.replace(row, **fields)


def _eagle3_draft() -> Path:
    return eagle_drafts.tiny_eagle3_draft(draft_vocab=EAGLE3_DRAFT_VOCAB)


NGRAM_CUDA_ONLY_0523 = "0.5.23 cannot build NGRAM on CPU: its worker imports CUDA-only sgl_kernel"
QWEN3_NEXT_CPU = (
    "0.5.23 cannot build Qwen3NextForCausalLM on CPU: its gated-delta-net layer asks for the "
    "CUDA device"
)
DFLASH_CPU = "0.5.23 refuses DFLASH on CPU (not supported by CpuSRTPlatform)"
NOT_PRICED = "0.5.23 keeps stock sizing here (the plugin steps aside with one WARNING); "

ROWS_0_5_23: tuple[Row, ...] = (
    dataclasses.replace(
        ROWS_BY_KEY["llama31-eagle3"],
        key="eagle3-docs",
        title="Llama-3.1 + EAGLE3, the guide's command verbatim",
        draft=_eagle3_draft,
        refused="ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode",
        engine=None,
        engine_blocker="refused by sglang 0.5.23's parser (see row llama31-eagle3)",
    ),
    _from_0513("llama31-eagle"),
    _from_0513("llama31-eagle3", draft=_eagle3_draft),
    _from_0513("gpt-oss-eagle3", draft=_eagle3_draft),
    _from_0513("standalone"),
    dataclasses.replace(
        ROWS_BY_KEY["dflash"],
        key="dflash-docs",
        title="DFLASH, SGLang's server-test command verbatim",
        refused="ambiguous option: --cuda-graph-bs could match --cuda-graph-bs-decode",
        engine=None,
        engine_blocker="refused by sglang 0.5.23's parser (see row dflash)",
    ),
    _from_0513("dflash", engine=None, engine_blocker=DFLASH_CPU),
    _from_0513(
        "ngram-docs",
        refused="unrecognized arguments: --speculative-ngram-max-match-window-size 12",
        engine_blocker=NGRAM_CUDA_ONLY_0523,
    ),
    _from_0513(
        "ngram",
        changes=(
            HUB_TO_TINY,
            DEVICE_CUDA,
            GRAPH_FLAG_CHANGE,
            "--speculative-ngram-max-match-window-size 12 dropped: 0.5.23 has no such flag "
            "(row ngram-docs)",
        ),
        engine_blocker=NGRAM_CUDA_ONLY_0523,
    ),
    _from_0513("deepseek-v3-mtp"),
    _from_0513("deepseek-v32-mtp", engine_blocker=DSA_NEEDS_CUDA_0523),
    _from_0513("glm45-mtp"),
    _from_0513(
        "qwen3-next-docs",
        refused="extra_buffer requires platform support for Mamba cache state snapshots",
        title=(
            "Qwen3-Next NEXTN, the usage page's command verbatim (refused on this platform: "
            "0.5.23 picks --mamba-scheduler-strategy extra_buffer and asserts the platform "
            "snapshots Mamba state; the H100 double covers memory and capability, not that)"
        ),
        engine_blocker="refused by sglang 0.5.23 here (see row qwen3-next-nextn)",
    ),
    _from_0513(
        "qwen3-next-nextn",
        changes=(
            HUB_TO_TINY,
            DEVICE_CUDA,
            "--disable-radix-cache added: the verbatim command is refused here (row "
            "qwen3-next-docs); without the radix cache 0.5.23 needs no Mamba state snapshots",
        ),
        engine_blocker=QWEN3_NEXT_CPU,
    ),
    _from_0513("mimo-v2-flash"),
    _from_0513("gemma4-frozen-kv-mtp"),
    _from_0513(
        "deepseek-v32-hisparse",
        engine_blocker=NOT_PRICED + DSA_NEEDS_CUDA_0523,
    ),
    _from_0513(
        "deepseek-v4-mtp",
        engine_blocker=(
            "not built on CPU (tried with a tiny V4-Flash-shaped config): 0.5.23's CPU rope "
            "factory refuses V4's SWA-only layers, its V4 KV pool stores only FP8, which cpu "
            "refuses without sgl-kernel's AMX backend, its attention is CUDA's (docs/limits.md). "
            "The plugin's V4 sizing hook runs on 0.5.23's configurators instead "
            "(test_dsv4_sizing_hook)"
        ),
    ),
)


ROWS = ROWS_0_5_13 if PHASES_ITSELF else ROWS_0_5_23


def probe_request(rows: tuple[Row, ...] = ROWS) -> dict[str, Any]:
    """The probe's request: recipe launches on the GPU double, plus (0.5.13.x) each Engine row's
    CPU launch (its stock target config is compared with the Engine's)."""
    launches = []
    for row in rows:
        env, check = dict(row.env), row.scheduler_check
        launches.append({"name": row.key, "argv": row.argv(), "env": env, "scheduler_check": check})
        if row.engine is not None and PHASES_ITSELF:
            argv = cli_args(engine_kwargs(row))
            cpu = {"name": f"{row.key}@cpu", "argv": argv, "env": env, "cpu_engine": True}
            launches.append({**cpu, "modes": ["off"]})
    return {"capacity_mib": GPU.total_mib, "capability": list(GPU_CAPABILITY), "launches": launches}


def run_probe(request: dict[str, Any], work_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Run the probe on every launch, plugin on and off: ``{(name, mode): result}``."""
    work_dir.mkdir(parents=True, exist_ok=True)
    request_path = work_dir / "request.json"
    request_path.write_text(json.dumps(request, indent=1))
    out_dir = work_dir / "results"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SGLANG_SPECINIT_", "SPECINIT_TEST_"))
        and k not in ("SGLANG_PLUGINS", "SGLANG_USE_CPU_ENGINE")
    }
    test_dir = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (test_dir, os.environ.get("PYTHONPATH", "")) if p
    )
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    log = work_dir / "probe.log"
    with open(log, "wb") as sink:
        proc = subprocess.run(
            [sys.executable, "-m", PROBE_MODULE, str(request_path), str(out_dir)],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    results = {}
    for path in sorted(out_dir.glob("*.json")):
        data = json.loads(path.read_text())
        results[(data["name"], data["mode"])] = data
    if proc.returncode != 0 or not results:
        tail = log.read_text(errors="replace")[-4000:]
        raise RuntimeError(f"fidelity probe failed (rc={proc.returncode})\n{tail}")
    return results


def server_args_differences(
    on: dict[str, Any], off: dict[str, Any], part: str = "server_args"
) -> dict[str, tuple]:
    """``{field: (plugin on, plugin off)}`` for every ServerArgs field (0.5.23: resolved, or with
    ``part="server_args_input"`` as given) that differs."""
    a, b = on[part], off[part]
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def parsed_recipe(argv: list[str]) -> dict[str, Any]:
    """The ``ServerArgs`` fields ``argv`` sets (those that differ from a command line naming only
    the model) as SGLang's own parser maps them, before resolution."""
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


def cli_args(kwargs: Mapping[str, Any]) -> list[str]:
    from harness.launch.engine import server_args_to_cli

    return server_args_to_cli(kwargs)


def plan_for_server(
    row: Row, kwargs: Mapping[str, Any], memory: Mapping[str, Any], capacity: int
) -> dict[str, Any]:
    """``sglang-specinit plan --json`` with the Engine's flags, the recipe's environment and the
    device numbers the server measured. 0.5.13.x plans in this process; 0.5.23 in a planner
    process of its own (:func:`harness.launch.release_suite.run_planner`)."""
    argv = [
        "plan",
        "--json",
        *cli_args(kwargs),
        "--device-memory", str(capacity),
        "--pre-load-free-bytes", str(memory["pre_load_free_bytes"]),
        "--resident-bytes", str(memory["resident_bytes"]),
    ]  # fmt: skip
    if not PHASES_ITSELF:
        from harness.launch.release_suite import run_planner

        return run_planner([sys.executable, "-m", "sglang_specinit.planner.cli", *argv], row.env)
    import contextlib
    import io
    from unittest import mock

    from sglang_specinit.planner.cli import main

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, row.env):
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    assert code == 0, f"plan exited {code}: {err.getvalue().strip()[-3000:]}"
    return json.loads(out.getvalue())


def recipe_algorithm(row: Row) -> str:
    """The recipe's ``--speculative-algorithm`` (or its abbreviation ``--speculative-algo``)."""
    for flag, value in zip(row.recipe, row.recipe[1:], strict=False):
        if flag in ("--speculative-algorithm", "--speculative-algo"):
            return value
    raise ValueError(f"row {row.key}: no speculative algorithm in {row.recipe}")
