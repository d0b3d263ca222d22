"""The fidelity matrix's rows on sglang 0.5.23: the documented recipes of
:mod:`harness.matrices.fidelity`, flag for flag as SGLang's own docs and cookbook pages give them,
run against 0.5.23."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.checkpoints import eagle_drafts

# The suite's EAGLE3 launch uses this draft (a reduced vocabulary: a hot-token map to bind).
from harness.launch.launch_0_5_23 import EAGLE3_DRAFT_VOCAB
from harness.matrices import fidelity
from harness.matrices.fidelity import ROWS_BY_KEY, Row

PROBE_MODULE = "harness.matrices.fidelity_probe_0523"
GRAPH_FLAG_CHANGE = (
    "--cuda-graph-max-bs / --cuda-graph-bs spelled --cuda-graph-max-bs-decode / "
    "--cuda-graph-bs-decode: 0.5.23 refuses the old flags as ambiguous (rows eagle3-docs, "
    "dflash-docs)"
)
# What every 0.5.23 CPU Engine needs whatever the recipe says (harness/launch/engine.py,
# harness/launch/sglang_release.py explain each one); the draft backend as in the 0.5.13 rows.
CPU_ENGINE_OVERRIDES: dict[str, Any] = {
    "device": "cpu",
    "attention_backend": "torch_native",
    "disable_decode_cuda_graph": True,
    "disable_prefill_cuda_graph": True,
    "grammar_backend": "none",
    "tp_size": 1,
    "log_level": "info",
    "random_seed": 0,
}
DSA_NEEDS_CUDA_0523 = (
    "0.5.23 cannot resolve a DeepSeek-V3.2 (DSA) launch on CPU: arg_groups/model_hook.py "
    "handle_model_specific_adjustments calls torch.cuda.get_device_capability() for the DSA "
    "defaults inside ServerArgs.resolve_once -> 'Found no NVIDIA driver on your system'"
)


# 0.5.23 splits both graph flags per phase; the recipes' values bound the decode graphs.
RESPELLED = {
    "--cuda-graph-max-bs": "--cuda-graph-max-bs-decode",
    "--cuda-graph-bs": "--cuda-graph-bs-decode",
}


def _respell(recipe: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(RESPELLED.get(a, a) for a in recipe)


def _from_0513(key: str, **changes: Any) -> Row:
    """The 0.5.13.post1 row ``key`` with the guide's graph flag as 0.5.23 spells it."""
    row = ROWS_BY_KEY[key]
    recipe = _respell(row.recipe)
    notes = row.changes + ((GRAPH_FLAG_CHANGE,) if recipe != row.recipe else ())
    fields = {"recipe": recipe, "changes": notes, "refused": None, **changes}
    return dataclasses.replace(row, **fields)


def _eagle3_draft() -> Path:
    return eagle_drafts.tiny_eagle3_draft(draft_vocab=EAGLE3_DRAFT_VOCAB)


NGRAM_CUDA_ONLY_0523 = (
    "0.5.23 cannot build NGRAM on CPU: speculative/ngram_worker.py imports "
    "sgl_kernel.speculative (CUDA kernels; sglang-kernel has no CPU build) at module level -> "
    "ModuleNotFoundError in the scheduler"
)
QWEN3_NEXT_CPU = (
    "0.5.23 cannot build Qwen3NextForCausalLM on CPU: models/qwen3_next.py (its gated-delta-net "
    "layer's __init__) calls torch.cuda.current_device() -> 'Found no NVIDIA driver on your "
    "system'"
)
DFLASH_CPU = (
    "0.5.23 refuses DFLASH on CPU while resolving the server arguments: "
    "arg_groups/speculative_hook.py _handle_dflash raises 'DFLASH speculative decoding is not "
    "supported by CpuSRTPlatform on device 'cpu'.'"
)
NOT_PRICED = "0.5.23 keeps stock sizing here (the plugin steps aside with one WARNING); "

ROWS: tuple[Row, ...] = (
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
            fidelity.HUB_TO_TINY,
            fidelity.DEVICE_CUDA,
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
            fidelity.HUB_TO_TINY,
            fidelity.DEVICE_CUDA,
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
            "factory refuses V4's SWA-only layers, the NextN draft's among them "
            "(layers/rotary_embedding/factory.py:478, rope_scaling None); the V4 KV pool "
            "stores only FP8 (mem_cache/deepseek_v4_memory_pool.py:321), which configure() "
            "refuses on cpu without sgl-kernel's AMX backend (mem_cache/"
            "kv_cache_configurator.py:460-467); V4 attention is CUDA's dsv4 backend. The "
            "plugin's V4 sizing hook runs on 0.5.23's configurators instead "
            "(test_dsv4_sizing_hook)"
        ),
    ),
)


def probe_request(rows: tuple[Row, ...] = ROWS) -> dict[str, Any]:
    """The :mod:`harness.matrices.fidelity_probe_0523` request: each recipe on the GPU double."""
    return {
        "capacity_mib": fidelity.GPU.total_mib,
        "capability": list(fidelity.GPU_CAPABILITY),
        "launches": [{"name": row.key, "argv": row.argv(), "env": dict(row.env)} for row in rows],
    }


def run_probe(request: dict[str, Any], work_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The 0.5.23 probe once for every launch, plugin on and off: ``{(name, mode): result}``."""
    return fidelity.run_probe(request, work_dir, module=PROBE_MODULE)


def server_args_differences(
    on: dict[str, Any], off: dict[str, Any], part: str = "server_args"
) -> dict[str, tuple]:
    """``{field: (plugin on, plugin off)}`` for every resolved (or input) field that differs."""
    a, b = on[part], off[part]
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def parsed_recipe(argv: list[str]) -> dict[str, Any]:
    """The ``ServerArgs`` fields a ``launch_server`` command line sets (those that differ from a
    command line naming only the model), as 0.5.23's own parser and ``from_cli_args`` map them,
    before resolution (a ``msgspec`` record: ``structs.asdict``)."""
    import argparse

    import msgspec
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    parsed = msgspec.structs.asdict(ServerArgs.from_cli_args(parser.parse_args(argv)))
    baseline = msgspec.structs.asdict(
        ServerArgs.from_cli_args(parser.parse_args(["--model-path", parsed["model_path"]]))
    )
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
    """``sglang-specinit plan --json`` in this (0.5.23) environment with the Engine's flags and
    the two device numbers the server measured (free before loading, resident at sizing)."""
    argv = [
        sys.executable, "-m", "sglang_specinit.planner.cli", "plan", "--json",
        *fidelity.cli_args(kwargs),
        "--device-memory", str(capacity),
        "--pre-load-free-bytes", str(memory["pre_load_free_bytes"]),
        "--resident-bytes", str(memory["resident_bytes"]),
    ]  # fmt: skip
    from harness.launch.sglang_release import extra_python_path

    env = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
    env.update(row.env)
    # The planner builds 0.5.23's pools on cpu, which imports sgl_kernel's CPU ops: the named
    # test double, as every 0.5.23 CPU process here gets it.
    env["PYTHONPATH"] = os.pathsep.join(
        [*extra_python_path(), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    if done.returncode != 0:
        raise PlannerCrash(f"plan exited {done.returncode}: {done.stderr.strip()[-3000:]}")
    return json.loads(done.stdout)


class PlannerCrash(RuntimeError):
    """``sglang-specinit plan`` exited non-zero (as opposed to planning other numbers)."""


def recipe_algorithm(row: Row) -> str:
    """The recipe's ``--speculative-algorithm`` (or its abbreviation ``--speculative-algo``)."""
    for flag, value in zip(row.recipe, row.recipe[1:], strict=False):
        if flag in ("--speculative-algorithm", "--speculative-algo"):
            return value
    raise ValueError(f"row {row.key}: no speculative algorithm in {row.recipe}")
