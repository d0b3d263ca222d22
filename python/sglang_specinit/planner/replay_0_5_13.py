"""The server-args replay for sglang 0.5.13.x: SGLang's own logic, run without its side effects.

For 0.5.13.post1 (:class:`Replay0513`, :data:`REPLAY_0_5_13`):

* the server arguments come from SGLang's own parser, turned into a ``ServerArgs`` whose
  ``__post_init__`` is skipped (that method probes devices and may download configs);
* the automatic ``--mem-fraction-static`` is ``ServerArgs._handle_piecewise_cuda_graph`` and
  ``ServerArgs._handle_gpu_memory_settings`` run on a copy, fed the device's total MiB;
* the speculative settings are ``handle_speculative_decoding`` (``arg_groups/speculative_hook.py``):
  alias resolution (NEXTN -> EAGLE), the MTP rule that a DeepSeek-V3/GLM-class target is its own
  draft, the step/top-k defaults and the ``max_running_requests = 48`` default;
* model geometry comes from ``ModelConfig.from_server_args`` for the target and, with
  ``is_draft_model=True``, for the draft, as ``TpModelWorker._init_model_config`` builds them;
* the KV dtype is ``ModelRunner.configure_kv_cache_dtype``'s choice; pools are priced from the
  model geometry (:mod:`sglang_specinit.specs`), so :meth:`Replay0513.pool_prices` is None.

The plan is for the device the flags name (``--device``, default ``cuda``), never for the host
the planner runs on: SGLang's host probe that would leak this process's platform into the
answer (``is_cpu()``, which reads ``SGLANG_USE_CPU_ENGINE``) is answered for the planned device
while the replay resolves (:func:`planned_cpu_engine`).
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator, Sequence
from typing import Any

from sglang_specinit.planner.gpus import DeviceSpec
from sglang_specinit.planner.inputs import PlanError, RaisingParser
from sglang_specinit.planner.replay import (
    CPU_ENGINE_ENV,
    PoolPrices,
    ResolvedLaunch,
    build_model_config,
    kv_cache_quant_algo,
    refuse_unpriced_model,
    released,
)
from sglang_specinit.specs import kv_dtype_name, own_hf_config

# --kv-cache-dtype values (0.5.13.post1 choices) -> the torch dtype ModelRunner stores.
_KV_DTYPE_FLAGS = {
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp4_e2m1": "float4_e2m1fn_x2",
}


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


def auto_mem_fraction_static(server_args: Any, capacity_mib: float, spec_reserve: bool) -> float:
    """The ``--mem-fraction-static`` SGLang picks when the user passes none.

    Runs 0.5.13.post1's ``_handle_piecewise_cuda_graph`` then ``_handle_gpu_memory_settings``
    on a copy. With ``spec_reserve=False`` the speculative algorithm is hidden from the latter,
    which leaves exactly 0.5.14's arithmetic (0.5.14 deleted the 4/6 GiB draft term and changed
    nothing else in that computation). The comparison with the raw CLI string is SGLang's own,
    so its quirk (``standalone`` in lower case gets 4 GiB, not 6) is reproduced, not fixed.
    """
    from sglang.srt.server_args import ServerArgs

    trial = copy.copy(server_args)
    released(ServerArgs._handle_piecewise_cuda_graph)(trial)
    # Its only other effect is an environment default for symmetric memory; keep ours clean.
    trial.enable_symm_mem = False
    if not spec_reserve:
        trial.speculative_algorithm = None
    released(ServerArgs._handle_gpu_memory_settings)(trial, capacity_mib)
    return float(trial.mem_fraction_static)


def resolve_speculative(server_args: Any) -> Any:
    """A copy of ``server_args`` after SGLang's ``handle_speculative_decoding``."""
    from sglang.srt.arg_groups.speculative_hook import handle_speculative_decoding

    resolved = copy.copy(server_args)
    if resolved.speculative_algorithm is not None:
        released(handle_speculative_decoding)(resolved)
    return resolved


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


def resolve_kv_dtype(flag: str, model_config: Any) -> str:
    """The KV dtype ``ModelRunner.configure_kv_cache_dtype`` (0.5.13.post1) would pick."""
    if flag == "auto":
        if kv_cache_quant_algo(model_config) == "FP8":
            return "float8_e4m3fn"
        return kv_dtype_name(model_config.dtype)
    return _KV_DTYPE_FLAGS[flag]


def check_parallel_layout(server_args: Any) -> None:
    """Refuse what SGLang 0.5.13.post1 itself refuses to launch with a speculative algorithm.

    ``ServerArgs.check_server_args`` asserts that pipeline parallelism runs without speculative
    decoding (it needs the overlap schedule off and no draft), so no PP plan can be served.
    """
    if int(server_args.pp_size) > 1 and server_args.speculative_algorithm is not None:
        raise PlanError(
            f"--pp-size {server_args.pp_size} with --speculative-algorithm "
            f"{server_args.speculative_algorithm}: sglang 0.5.13.post1 refuses pipeline "
            "parallelism with speculative decoding (ServerArgs.check_server_args); drop --pp-size"
        )


class Replay0513:
    """sglang 0.5.13.x: ``ServerArgs`` without ``__post_init__``, its two memory methods and the
    speculative hook run on copies (:func:`inert_server_args`, :func:`auto_mem_fraction_static`,
    :func:`resolve_speculative`), ``ModelRunner.configure_kv_cache_dtype``'s choice."""

    release = "0.5.13.post1"

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

    def resolve(self, server_args: Any, device: DeviceSpec) -> ResolvedLaunch:
        from sglang.srt.configs.model_config import ModelConfig

        with planned_cpu_engine(server_args.device):
            target_mc = build_model_config(ModelConfig.from_server_args, server_args)
            # A draft read from the same checkpoint rewrites the cached hf config in place.
            own_hf_config(target_mc)
            # get_model_config() caches here; the heuristics and the speculative hook reuse it.
            server_args.model_config = target_mc
            refuse_unpriced_model(target_mc)
            user_fraction = server_args.mem_fraction_static
            if user_fraction is None:
                stock = auto_mem_fraction_static(server_args, device.capacity_mib, True)
                new = auto_mem_fraction_static(server_args, device.capacity_mib, False)
            else:
                stock = new = float(user_fraction)
            spec_args = resolve_speculative(server_args)
            attn_tp = attention_tp_size(spec_args)
            check_parallel_layout(spec_args)
        return ResolvedLaunch(
            args=spec_args,
            config_source=spec_args,
            target_model_config=target_mc,
            stock_fraction=stock,
            new_fraction=new,
            attn_tp_size=attn_tp,
            dp_size=int(spec_args.dp_size),
            mla_server_args=spec_args,
        )

    def kv_dtype(
        self, launch: ResolvedLaunch, model_config: Any, *, is_draft: bool, target_kv_dtype: Any
    ) -> str:
        flag = launch.args.kv_cache_dtype
        if is_draft and target_kv_dtype == "float8_e4m3fn":
            # The target resolves "auto" first and, for an FP8 kv_cache_quant_algo, rewrites
            # server_args.kv_cache_dtype to fp8_e4m3, which the draft runner then reads.
            flag = "fp8_e4m3"
        return resolve_kv_dtype(flag, model_config)

    def pool_prices(self, launch: ResolvedLaunch, device: DeviceSpec) -> PoolPrices | None:
        """None: 0.5.13.x's pools are priced from the model geometry (:mod:`specs`), the
        widths ``pool_probe`` measures at runtime (checked by the 0.5.13 fidelity tests)."""
        return None


REPLAY_0_5_13 = Replay0513()
