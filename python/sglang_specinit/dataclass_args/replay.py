"""The server-args replay pieces of releases whose ``ServerArgs`` is a dataclass that resolves
every field in ``__post_init__`` and whose speculative settings come from
``arg_groups.speculative_hook.handle_speculative_decoding`` (sglang 0.5.13.x to 0.5.15).

Those releases share the parser (``ServerArgs.add_cli_args``, ``ConfigArgumentMerger`` for
``--config``), the speculative hook and the attention-TP rule; each adapter's
``planner_replay`` subclasses :class:`FieldServerArgsReplay` with its release's own fraction
heuristic, KV dtype and pool prices.

The plan is for the device the flags name (``--device``, default ``cuda``), never for the host
the planner runs on: SGLang's host probe that would leak this process's platform into the
answer (``is_cpu()``, which reads ``SGLANG_USE_CPU_ENGINE``) is answered for the planned device
while a replay resolves (:func:`planned_cpu_engine`).
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator, Sequence
from typing import Any

from sglang_specinit.model_facts import own_hf_config
from sglang_specinit.planner.inputs import PlanError, RaisingParser
from sglang_specinit.planner.replay import (
    CPU_ENGINE_ENV,
    build_model_config,
    refuse_unpriced_model,
    released,
)


@contextlib.contextmanager
def planned_cpu_engine(device: str | None) -> Iterator[None]:
    """SGLang's ``is_cpu()`` answering for the planned ``device``, not for this process.

    ``is_cpu()`` (``utils/common.py``, both releases) is ``SGLANG_USE_CPU_ENGINE == "1"`` on an
    x86/arm host, cached by ``lru_cache``. 0.5.13.post1's ``_handle_piecewise_cuda_graph``
    disables piecewise CUDA graphs when it is true, which drops their reserve from the automatic
    fraction (the default example: 0.779 -> 0.785); 0.5.23's model overrides read it too. A plan
    for a GPU must not move because the shell that runs the planner is set up for CPU tests, so
    for the duration the variable says what the planned server would see (``1`` only for
    ``--device cpu``) and the cached answer is recomputed before and after.
    """
    from sglang.srt.utils.common import is_cpu

    saved = os.environ.get(CPU_ENGINE_ENV)
    os.environ[CPU_ENGINE_ENV] = "1" if device == "cpu" else "0"
    is_cpu.cache_clear()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(CPU_ENGINE_ENV, None)
        else:
            os.environ[CPU_ENGINE_ENV] = saved
        is_cpu.cache_clear()


def inert_server_args(namespace: Any) -> Any:
    """``ServerArgs.from_cli_args(namespace)`` minus ``__post_init__``.

    ``from_cli_args`` maps the CLI names (``tensor_parallel_size`` -> ``tp_size`` ...) and fills
    every dataclass default; skipping ``__post_init__`` avoids device probes and downloads. The
    few defaults ``__post_init__`` would have resolved and the plan needs are set explicitly:
    a CUDA device (the plan is for a GPU server) and ``page_size`` 1 (``_handle_page_size``'s
    CUDA default; attention backends that force another size need ``--page-size``).
    """
    from sglang.srt.server_args import ServerArgs

    class _InertServerArgs(ServerArgs):
        def __post_init__(self) -> None:
            pass

    server_args = _InertServerArgs.from_cli_args(copy.copy(namespace))
    if server_args.device is None:
        server_args.device = "cuda"
    if server_args.page_size is None:
        server_args.page_size = 1
    if server_args.speculative_draft_model_quantization is None:
        # _handle_missing_default_values: the draft inherits the target's quantization.
        server_args.speculative_draft_model_quantization = server_args.quantization
    return server_args


def resolve_speculative(server_args: Any) -> Any:
    """A copy of ``server_args`` after SGLang's ``handle_speculative_decoding``."""
    from sglang.srt.arg_groups.speculative_hook import handle_speculative_decoding

    resolved = copy.copy(server_args)
    if resolved.speculative_algorithm is not None:
        released(handle_speculative_decoding)(resolved)
    return resolved


def auto_mem_fraction_static(server_args: Any, capacity_mib: float) -> float:
    """The ``--mem-fraction-static`` the installed release picks when the user passes none:
    its ``_handle_cuda_graph_config`` (the graph settings the heuristic reads) then
    ``_handle_gpu_memory_settings(capacity_mib)``, on a copy (the releases without a flat
    speculative reserve: 0.5.14 on)."""
    from sglang.srt.server_args import ServerArgs

    trial = copy.deepcopy(server_args)
    released(ServerArgs._handle_cuda_graph_config)(trial)
    # Its only other effect is an environment default for symmetric memory; keep ours clean.
    trial.enable_symm_mem = False
    released(ServerArgs._handle_gpu_memory_settings)(trial, capacity_mib)
    return float(trial.mem_fraction_static)


def attention_tp_size(server_args: Any) -> int:
    """Attention-TP size, by SGLang's ``compute_dp_attention_world_info``."""
    from sglang.srt.layers.dp_attention import compute_dp_attention_world_info

    _, attn_tp, _, _ = compute_dp_attention_world_info(
        server_args.enable_dp_attention,
        0,
        server_args.tp_size,
        server_args.dp_size,
        server_args.attn_cp_size,
    )
    return attn_tp


def target_model_config(server_args: Any) -> Any:
    """The target's ``ModelConfig`` as ``TpModelWorker`` builds it, with a private hf config (a
    draft read from the same checkpoint rewrites the cached one in place), cached on
    ``server_args`` where ``get_model_config()`` looks (the fraction heuristic and the
    speculative hook reuse it); a model the planner does not price is refused here."""
    from sglang.srt.configs.model_config import ModelConfig

    target_mc = build_model_config(ModelConfig.from_server_args, server_args)
    own_hf_config(target_mc)
    server_args.model_config = target_mc
    refuse_unpriced_model(target_mc)
    return target_mc


def refuse_speculative_pp(spec_args: Any, release: str) -> None:
    """PP with a speculative algorithm keeps stock sizing on these releases: nothing to plan."""
    if int(spec_args.pp_size) > 1 and spec_args.speculative_algorithm is not None:
        raise PlanError(
            f"--pp-size {spec_args.pp_size} with --speculative-algorithm "
            f"{spec_args.speculative_algorithm}: sglang-specinit keeps stock sizing for "
            f"pipeline parallelism on sglang {release}; drop --pp-size"
        )


class FieldServerArgsReplay:
    """The parser every dataclass-``ServerArgs`` release shares: ``launch_server``'s own, into a
    ``ServerArgs`` whose ``__post_init__`` is skipped (:func:`inert_server_args`)."""

    def parse_launch(self, launch: Sequence[str]) -> Any:
        from sglang.srt.server_args import ServerArgs

        # Abbreviations as launch_server accepts them (SGLang's docs write --tp for --tp-size).
        parser = RaisingParser(prog="sglang-specinit plan")
        ServerArgs.add_cli_args(parser)
        argv = list(launch)
        if "--config" in argv:
            from sglang.srt.server_args_config_parser import ConfigArgumentMerger

            argv = ConfigArgumentMerger(parser).merge_config_with_args(argv)
        return inert_server_args(parser.parse_args(argv))
