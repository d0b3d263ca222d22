"""The server-args replay shared by releases whose ``ServerArgs`` resolves in ``__post_init__``
and ``handle_speculative_decoding``; each adapter adds its fraction, KV dtype and prices."""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator, Sequence
from typing import Any

from sglang_specinit.model_facts import own_hf_config
from sglang_specinit.planner.inputs import PlanError
from sglang_specinit.planner.replay import (
    CPU_ENGINE_ENV,
    build_model_config,
    config_errors,
    parse_launch_flags,
    refuse_unpriced_model,
    released,
)
from sglang_specinit.pool_measure import attributes_restored


@contextlib.contextmanager
def planned_cpu_engine(device: str | None) -> Iterator[None]:
    """SGLang's cached ``is_cpu()`` answering for the planned ``device``, not this shell (it
    moves the automatic fraction through the piecewise CUDA graph reserve)."""
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


def resolve_speculative(server_args: Any) -> Any:
    """A copy of ``server_args`` after SGLang's ``handle_speculative_decoding``."""
    from sglang.srt.arg_groups.speculative_hook import handle_speculative_decoding

    resolved = copy.copy(server_args)
    if resolved.speculative_algorithm is not None:
        try:
            released(handle_speculative_decoding)(resolved)
        except config_errors() as e:  # it builds the draft's model config
            raise PlanError(f"SGLang cannot read the draft's config.json: {e}") from e
    return resolved


def auto_mem_fraction_static(server_args: Any, capacity_mib: float) -> float:
    """The automatic ``--mem-fraction-static``: the release's graph settings, then its memory
    heuristic, on a copy (releases without a flat speculative reserve)."""
    from sglang.srt.server_args import ServerArgs

    trial = copy.deepcopy(server_args)
    released(ServerArgs._handle_cuda_graph_config)(trial)
    # Its only other effect is an environment default for symmetric memory; keep ours clean.
    trial.enable_symm_mem = False
    released(ServerArgs._handle_gpu_memory_settings)(trial, capacity_mib)
    return float(trial.mem_fraction_static)


def attention_tp_size(server_args: Any) -> int:
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
    """The target's ``ModelConfig`` with a private hf config, cached on ``server_args`` where
    the heuristic and the speculative hook look; an unpriced model is refused."""
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


KV4_UNCHECKED_NOTE = (
    "not checked: SGLang's KV4 check of --kv-cache-dtype fp4_e2m1 against the attention backend "
    "the launch picks on the GPU (pass --attention-backend to have it checked)"
)


def check_kv4(server_args: Any, release: str) -> tuple[str, ...]:
    """The release's KV4 check of an fp4_e2m1 KV cache, on a copy, for the planned device: a
    refusal in SGLang's words, or a note where the GPU's own default backend would decide."""
    import sglang.srt.server_args as server_args_module

    if server_args.kv_cache_dtype != "fp4_e2m1":
        return ()
    on_gpu = server_args.device != "cpu"
    both_phases = server_args.prefill_attention_backend and server_args.decode_attention_backend
    if on_gpu and not (server_args.attention_backend or both_phases):
        # The default comes from the GPU's compute capability and the model's adjustments.
        return (KV4_UNCHECKED_NOTE,)
    trial = copy.copy(server_args)
    with attributes_restored(server_args_module, ["is_cuda"]):
        server_args_module.is_cuda = lambda: on_gpu
        try:
            released(server_args_module.ServerArgs._handle_kv4_compatibility)(trial)
        except (AssertionError, RuntimeError) as error:
            change = "an attention backend its KV4 check accepts or " if on_gpu else ""
            raise PlanError(
                f"sglang {release} refuses --kv-cache-dtype fp4_e2m1 here: "
                f"{str(error).rstrip('.')}; pass {change}another --kv-cache-dtype"
            ) from None
    return ()


class FieldServerArgsReplay:
    """``launch_server``'s parser, into a ``ServerArgs`` whose ``__post_init__`` is skipped."""

    def config_merger(self) -> Any:
        from sglang.srt.server_args_config_parser import ConfigArgumentMerger

        return ConfigArgumentMerger

    def parse_launch(self, launch: Sequence[str]) -> Any:
        """``ServerArgs.from_cli_args`` minus ``__post_init__`` (no device probes or downloads),
        with the defaults the plan needs: device ``cuda``, ``page_size`` 1."""
        from sglang.srt.server_args import ServerArgs

        class _InertServerArgs(ServerArgs):
            def __post_init__(self) -> None:
                pass

        namespace = parse_launch_flags(launch, self.config_merger())
        server_args = _InertServerArgs.from_cli_args(copy.copy(namespace))
        if server_args.device is None:
            server_args.device = "cuda"
        if server_args.page_size is None:
            server_args.page_size = 1
        if server_args.speculative_draft_model_quantization is None:
            # _handle_missing_default_values: the draft inherits the target's quantization.
            server_args.speculative_draft_model_quantization = server_args.quantization
        return server_args
