"""What a served release's server-args replay (:class:`ServerArgsReplay`) answers the plan, and
what the replays share."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sglang_specinit.budget import BudgetError, BudgetInputs, KVSpec, PoolPlan
from sglang_specinit.model_facts import is_linear_attention_hybrid
from sglang_specinit.planner.gpus import DeviceSpec
from sglang_specinit.planner.inputs import PlanError, RaisingParser

# SGLang's is_cpu() reads this variable.
CPU_ENGINE_ENV = "SGLANG_USE_CPU_ENGINE"


@dataclass(frozen=True)
class ResolvedLaunch:
    """What the release's server-args logic decided: ``args`` after its speculative hook,
    ``config_source`` for its ``ModelConfig.from_server_args``."""

    args: Any
    config_source: Any
    target_model_config: Any
    # --mem-fraction-static as the release computes it, and without a flat speculative reserve.
    stock_fraction: float
    new_fraction: float
    attn_tp_size: int
    dp_size: int
    # For SGLang's calculate_mla_kv_cache_dim; None: the plain width.
    mla_server_args: Any
    # What the replay could not check, printed under the plan.
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PoolPrices:
    """A launch's pools priced per target token row, and stock's sizing, by the release's code."""

    target_kv: KVSpec
    draft_pools: tuple[KVSpec, ...]
    draft_fixed_bytes: int
    stock_plan: Callable[[BudgetInputs], PoolPlan]
    draft_request_bytes: int = 0
    # Where this package's column is not the shared budget model's (DeepSeek-V4).
    ours_plan: Callable[[BudgetInputs], PoolPlan] | None = None


# The two things a phased release's stock column says about the draft.
def duplicates_note(release: str) -> str:
    return f"{release} profiles while the draft's duplicate embed/lm_head are resident"


def short_reserve_note(release: str) -> str:
    return f"{release} reserves less draft KV per token than the draft allocates"


class ServerArgsReplay(Protocol):
    """One served release's launch_server parser and server-args resolution, run offline."""

    release: str
    # The shortest longest-request (min(context length, pool tokens) - 1) its scheduler accepts.
    shortest_request_tokens: int

    def parse_launch(self, launch: Sequence[str]) -> Any:
        """The release's ``launch_server`` parser; bad flags raise :class:`PlanError`."""

    def resolve(self, server_args: Any, device: DeviceSpec) -> ResolvedLaunch:
        """The release's decisions; its refusals raise ``ValueError``."""

    def kv_dtype(
        self, launch: ResolvedLaunch, model_config: Any, *, is_draft: bool, target_kv_dtype: Any
    ) -> str: ...

    def pool_prices(self, launch: ResolvedLaunch, device: DeviceSpec) -> PoolPrices: ...


def released(fn: Any) -> Any:
    """SGLang's function without the plugin's hooks, for the stock column."""
    return inspect.unwrap(fn)


def config_errors() -> tuple[type[Exception], ...]:
    """What transformers and SGLang raise on a config.json they cannot read (field, type, zero)."""
    from huggingface_hub import errors

    strict = getattr(errors, "StrictDataclassError", None)  # huggingface_hub 1.x validation
    return (AttributeError, KeyError, TypeError, OSError, ArithmeticError, *filter(None, [strict]))


def build_model_config(build: Any, server_args: Any, **kwargs: Any) -> Any:
    """``ModelConfig.from_server_args``, with a malformed config reported as bad input."""
    path = kwargs.get("model_path") or server_args.model_path
    try:
        return build(server_args, **kwargs)
    except config_errors() as e:
        raise PlanError(f"SGLang cannot build a ModelConfig from {path}: {e}") from e


@contextlib.contextmanager
def cuda_quantization_names() -> Iterator[None]:
    """Let ``ModelConfig``'s name check accept ``mxfp4``, registered only on CUDA builds: the
    plan is for a CUDA server, maybe made on a CPU host."""
    from sglang.srt.layers.quantization import QUANTIZATION_METHODS
    from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config

    added = "mxfp4" not in QUANTIZATION_METHODS
    if added:
        QUANTIZATION_METHODS["mxfp4"] = Mxfp4Config
    try:
        yield
    finally:
        if added:
            QUANTIZATION_METHODS.pop("mxfp4", None)


# Modules that bind SGLang's is_float4_e2m1fn_x2 by name (those the installed release has).
_FLOAT4_READERS = (
    "sglang.srt.model_executor.model_runner_kv_cache_mixin",
    "sglang.srt.model_executor.pool_configurator",
    "sglang.srt.mem_cache.kv_cache_configurator",
)


@contextlib.contextmanager
def cuda_float4_pools(server_args: Any) -> Iterator[None]:
    """SGLang's FP4 KV test answering for the planned device: it is true on a CUDA host only,
    so a GPU plan made on a CPU host would price the non-FP4 pool classes. An FP4 pool that
    SGLang's own class cannot build fails the launch on every rank: refused."""
    import importlib
    import importlib.util

    import torch

    fp4 = getattr(torch, "float4_e2m1fn_x2", None)
    on_gpu = server_args.device != "cpu" and fp4 is not None
    if "fp4" not in str(server_args.kv_cache_dtype):
        # Other plans import nothing early: SGLang's lazy imports keep their own order.
        yield
        return
    with contextlib.ExitStack() as stack:
        for name in _FLOAT4_READERS:
            if importlib.util.find_spec(name) is None:
                continue
            module = importlib.import_module(name)
            if hasattr(module, "is_float4_e2m1fn_x2"):
                stack.callback(setattr, module, "is_float4_e2m1fn_x2", module.is_float4_e2m1fn_x2)
                module.is_float4_e2m1fn_x2 = lambda dtype: on_gpu and dtype == fp4
        try:
            yield
        except AttributeError as error:
            # Only a failure of the FP4 pool object itself is the launch's.
            if not (on_gpu and "FP4" in type(getattr(error, "obj", None)).__name__):
                raise
            raise PlanError(
                f"sglang {installed_release()} cannot build its FP4 KV pool for this launch "
                f"({error}), so every rank fails to start; pass another --kv-cache-dtype"
            ) from None


@contextlib.contextmanager
def fresh_hf_configs() -> Iterator[None]:
    """Each plan reads its checkpoints' configs afresh: a draft ``ModelConfig`` may rename the
    architecture of the config SGLang's ``get_config`` cached."""
    from sglang.srt.configs import model_config

    clear = getattr(model_config.get_config, "cache_clear", None) or (lambda: None)
    clear()
    try:
        yield
    finally:
        clear()


def kv_cache_quant_algo(model_config: Any) -> str | None:
    """The checkpoint's ``kv_cache_quant_algo`` (ModelOpt), from SGLang's parse."""
    parsed = model_config._parse_quant_hf_config() or {}
    for section in (parsed, parsed.get("quantization") or {}):
        algo = section.get("kv_cache_quant_algo")
        if isinstance(algo, str):
            return algo.upper()
        scheme = section.get("kv_cache_scheme")
        fp8 = isinstance(scheme, dict) and scheme.get("type") == "float"
        if fp8 and scheme.get("num_bits") == 8:
            return "FP8"
    return None


def refuse_unpriced_model(target_mc: Any) -> None:
    """Mamba/linear-attention hybrids: their state pool is not priced offline."""
    if is_linear_attention_hybrid(target_mc):
        raise BudgetError(
            f"{target_mc.hf_config.architectures[0]}: mamba/linear-attention state is not "
            "priced by the offline planner"
        )


def installed_release() -> str:
    from sglang_specinit.compat import installed_sglang_version

    return str(installed_sglang_version())


def parse_launch_flags(launch: Sequence[str], config_merger: Any) -> Any:
    """``launch_server``'s parser on ``launch``, with ``--config`` merged by the release's
    ``ConfigArgumentMerger`` (``config_merger``: its module is the adapter's to name)."""
    from sglang.srt.server_args import ServerArgs

    parser = RaisingParser(prog="sglang-specinit plan")
    ServerArgs.add_cli_args(parser)
    argv = list(launch)
    if "--config" in argv:
        argv = config_merger(parser).merge_config_with_args(argv)
    return parser.parse_args(argv)


class InstalledReleaseReplay:
    shortest_request_tokens = 1

    @property
    def release(self) -> str:
        return installed_release()
