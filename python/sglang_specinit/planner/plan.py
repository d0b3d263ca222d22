"""The offline planner: launch_server flags + local checkpoints in, pool plans out.

It runs the pieces of the installed SGLang's start-up that decide the pool size, without a GPU
and without network access (``HF_HUB_OFFLINE=1``). Which pieces, and how they are called, is
release-specific and lives in one *server-args replay* per served release (a
:class:`ServerArgsReplay`): this module's :data:`REPLAY_0_5_13` for 0.5.13.x, and
:mod:`sglang_specinit.planner.release_0_5_23` for 0.5.23. For 0.5.13.post1:

* the server arguments come from SGLang's own parser, turned into a ``ServerArgs`` whose
  ``__post_init__`` is skipped (that method probes devices and may download configs);
* the automatic ``--mem-fraction-static`` is ``ServerArgs._handle_piecewise_cuda_graph`` and
  ``ServerArgs._handle_gpu_memory_settings`` run on a copy, fed the device's total MiB;
* the speculative settings are ``handle_speculative_decoding`` (``arg_groups/speculative_hook.py``):
  alias resolution (NEXTN -> EAGLE), the MTP rule that a DeepSeek-V3/GLM-class target is its own
  draft, the step/top-k defaults and the ``max_running_requests = 48`` default;
* model geometry comes from ``ModelConfig.from_server_args`` for the target and, with
  ``is_draft_model=True``, for the draft, as ``TpModelWorker._init_model_config`` builds them.

Whatever the release, :func:`_build_plan` is the one place that turns the replay's answer into
the sizing inputs, through ``live_sizing.plan_from_readings``, the sizing path both runtime
adapters run. The KV prices are the replay's (0.5.23: its server's ``price_configurators`` on
the configurators 0.5.23 builds) or :mod:`sglang_specinit.specs` (0.5.13.x). Weight bytes come from
checkpoint headers (:mod:`sglang_specinit.planner.weights`), priced per rank by the SGLang layer
that loads each tensor (:mod:`sglang_specinit.planner.sharding`: replicated norms, padded
vocabulary shards, replicated KV heads, dp-attention groups).

The plan is for the device the flags name (``--device``, default ``cuda``), never for the host
the planner runs on: SGLang's host probes that would leak this process's platform into the
answer (``is_cpu()``, which reads ``SGLANG_USE_CPU_ENGINE``) are answered for the planned device
while a replay runs (:func:`planned_cpu_engine`).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn, Protocol

from sglang_specinit.budget import (
    BudgetError,
    BudgetInputs,
    DraftSpec,
    KVSpec,
    PoolPlan,
    sized_by_target,
)
from sglang_specinit.live_sizing import SizingReadings, plan_from_readings
from sglang_specinit.planner.gpus import MIB
from sglang_specinit.planner.sharding import (
    ShardLayout,
    draft_layout,
    model_layout,
    rank_vocab_table_bytes,
    sizes_on_rank,
)
from sglang_specinit.planner.weights import (
    WeightSplit,
    mtp_layer_prefixes,
    read_checkpoint_sizes,
    shared_tensor_names,
    split_mtp_from_target,
    split_separate_draft,
)
from sglang_specinit.release_rules import stock_0_5_13_plan, upstream_0_5_14_plan
from sglang_specinit.report import ReportColumn
from sglang_specinit.specs import (
    check_supported,
    draft_extra_bytes,
    draft_kv_pools,
    is_linear_attention_hybrid,
    kv_dtype_name,
    kv_spec_from_model_config,
    own_hf_config,
    runner_layer_count,
    upstream_reserved_layers,
)

EXAMPLES_DIR = Path(__file__).parent / "examples"
DEFAULT_EXAMPLE = "llama31-8b-eagle3"

# --kv-cache-dtype values (0.5.13.post1 choices) -> the torch dtype ModelRunner stores.
_KV_DTYPE_FLAGS = {
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp4_e2m1": "float4_e2m1fn_x2",
}


class PlanError(ValueError):
    """Bad planner input; the message is one line meant for the user."""


class RaisingParser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage, so every bad input is one line."""

    def error(self, message: str) -> NoReturn:
        raise PlanError(message)


CPU_ENGINE_ENV = "SGLANG_USE_CPU_ENGINE"


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


# --------------------------------------------------------------------------------------------
# Shipped examples


@dataclass(frozen=True)
class Example:
    """A shipped example: its directory and the launch flags it stands for."""

    name: str
    directory: Path
    description: str
    launch_args: tuple[str, ...]
    gpu: str | None


def list_examples() -> list[str]:
    return sorted(p.parent.name for p in EXAMPLES_DIR.glob("*/example.json"))


def load_example(name: str) -> Example:
    """Read ``examples/<name>/example.json``; relative model paths resolve inside the example.

    The file holds the ``launch_server`` flags the example represents as snake_case keys
    (``model_path``, ``speculative_algorithm``, ``tp_size``, ...) plus ``gpu`` (a preset name)
    and ``description``; a null value means "flag not passed".
    """
    path = EXAMPLES_DIR / name / "example.json"
    if not path.is_file():
        raise PlanError(
            f"unknown --example {name!r}; shipped examples: {', '.join(list_examples())}"
        )
    data = json.loads(path.read_text())
    args: list[str] = []
    for key, value in data.get("launch", {}).items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if key in ("model_path", "speculative_draft_model_path"):
            value = str((path.parent / value).resolve())
        args += [flag] if value is True else [flag, str(value)]
    return Example(
        name=name,
        directory=path.parent,
        description=data.get("description", ""),
        launch_args=tuple(args),
        gpu=data.get("gpu"),
    )


# --------------------------------------------------------------------------------------------
# Cheap checks, before SGLang is imported


def read_config_json(model_dir: str, what: str) -> dict[str, Any]:
    """``config.json`` of a local model directory, with one-line errors for the usual mistakes."""
    if not os.path.isdir(model_dir):
        raise PlanError(f"{what} {model_dir!r} is not a local directory (the planner is offline)")
    config_path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(config_path):
        raise PlanError(f"{what} {model_dir!r} has no config.json")
    try:
        with open(config_path) as f:
            config = json.load(f)
    except json.JSONDecodeError as e:
        raise PlanError(f"{config_path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    archs = config.get("architectures") if isinstance(config, dict) else None
    if not archs or not isinstance(archs, list):
        raise PlanError(f"{config_path} has no 'architectures' list; SGLang cannot pick a model")
    return config


def check_launch_values(
    model_path: str | None,
    draft_path: str | None,
    algorithm: str | None,
    mem_fraction_static: float | None,
) -> None:
    """Validate what can be validated from the raw flags and config.json files alone.

    Which speculative launches need a draft path is SGLang's decision (its argument hook),
    not the planner's: a path-less EAGLE/NEXTN draft is built from the target's checkpoint.
    """
    if mem_fraction_static is not None and not 0.0 < mem_fraction_static < 1.0:
        raise PlanError(f"--mem-fraction-static must be in (0, 1), got {mem_fraction_static}")
    if model_path is None:
        raise PlanError("--model-path is required (or use --example NAME)")
    read_config_json(model_path, "--model-path")
    if draft_path is not None:
        read_config_json(draft_path, "--speculative-draft-model-path")


# --------------------------------------------------------------------------------------------
# SGLang's server-args logic, run without its side effects


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


def _released(fn: Any) -> Any:
    """SGLang's function as released: plugin hooks (this package's runtime patch drops the
    speculative reserve from the heuristic) wrap it with ``__wrapped__`` set, and the planner
    must compute the stock column even in a process where the plugin is loaded."""
    return inspect.unwrap(fn)


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
    _released(ServerArgs._handle_piecewise_cuda_graph)(trial)
    # Its only other effect is an environment default for symmetric memory; keep ours clean.
    trial.enable_symm_mem = False
    if not spec_reserve:
        trial.speculative_algorithm = None
    _released(ServerArgs._handle_gpu_memory_settings)(trial, capacity_mib)
    return float(trial.mem_fraction_static)


def resolve_speculative(server_args: Any) -> Any:
    """A copy of ``server_args`` after SGLang's ``handle_speculative_decoding``."""
    from sglang.srt.arg_groups.speculative_hook import handle_speculative_decoding

    resolved = copy.copy(server_args)
    if resolved.speculative_algorithm is not None:
        _released(handle_speculative_decoding)(resolved)
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


def kv_cache_quant_algo(model_config: Any) -> str | None:
    """The checkpoint's ``kv_cache_quant_algo`` (ModelOpt), read from SGLang's parse of
    ``quantization_config`` / ``hf_quant_config.json``."""
    parsed = model_config._parse_quant_hf_config() or {}
    for section in (parsed, parsed.get("quantization") or {}):
        algo = section.get("kv_cache_quant_algo")
        if isinstance(algo, str):
            return algo.upper()
        scheme = section.get("kv_cache_scheme")
        if isinstance(scheme, dict) and (scheme.get("type"), scheme.get("num_bits")) == (
            "float",
            8,
        ):
            return "FP8"
    return None


def resolve_kv_dtype(flag: str, model_config: Any) -> str:
    """The KV dtype ``ModelRunner.configure_kv_cache_dtype`` (0.5.13.post1) would pick."""
    if flag == "auto":
        if kv_cache_quant_algo(model_config) == "FP8":
            return "float8_e4m3fn"
        return kv_dtype_name(model_config.dtype)
    return _KV_DTYPE_FLAGS[flag]


# --------------------------------------------------------------------------------------------
# The plan


@dataclass(frozen=True)
class DeviceSpec:
    """The device the plan is for: total memory (heuristic input) and pre-load free bytes."""

    name: str
    total_bytes: int
    pre_load_free_bytes: int
    # Measured resident bytes (a server's SPECINIT_MEMORY resident_bytes) replacing the
    # checkpoint estimate in this package's column; None: add up the checkpoints.
    resident_bytes: int | None = None
    # CUDA compute capability (90 = sm_90) of a preset; None: not known (--device-memory).
    sm: int | None = None

    @property
    def capacity_mib(self) -> float:
        return self.total_bytes / MIB


@dataclass(frozen=True)
class OfflinePlan:
    """The three columns of the report and what they were computed from."""

    stock: ReportColumn
    upstream: ReportColumn
    ours: ReportColumn
    tp_size: int
    device: DeviceSpec
    algorithm: str | None
    model_path: str
    draft_model_path: str | None
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The installed release's stock column from its own sizing code on the same pools
    # (:attr:`PoolPrices.stock_plan`); None where the replay prices no pools.
    release_stock: ReportColumn | None = None

    @property
    def columns(self) -> tuple[ReportColumn, ReportColumn, ReportColumn]:
        return (self.stock, self.upstream, self.ours)


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


# --------------------------------------------------------------------------------------------
# One release's server-args logic, as the plan reads it


@dataclass(frozen=True)
class ResolvedLaunch:
    """What one release's server-args logic decided for a launch, in the shape the plan reads.

    ``args`` answers attribute reads (``speculative_algorithm``, ``tp_size``, ``page_size``,
    ``kv_cache_dtype``, ``max_running_requests`` ...) with the values after that release's
    speculative hook; ``config_source`` is what its ``ModelConfig.from_server_args`` takes.
    """

    args: Any
    config_source: Any
    target_model_config: Any
    # The automatic --mem-fraction-static as the release computes it (the user's value when
    # given), and the same without a flat speculative reserve (0.5.14+; equal where none exists).
    stock_fraction: float
    new_fraction: float
    attn_tp_size: int
    # Attention-DP width the budget divides --max-running-requests by.
    dp_size: int
    # Server args for specs' MLA width (SGLang's calculate_mla_kv_cache_dim); None: plain width.
    mla_server_args: Any


@dataclass(frozen=True)
class PoolPrices:
    """A launch's KV pools priced by the installed release's own pool code (what its server
    runs), per target token row: the target's pool, each draft runner's, the draft's
    fixed-size pools in bytes."""

    target_kv: KVSpec
    draft_pools: tuple[KVSpec, ...]
    draft_fixed_bytes: int
    # Bytes per request row of the draft's per-request buffers, by the release's own rule.
    draft_request_bytes: int = 0
    # The release's own stock sizing on the same configurators: inputs -> stock's plan.
    stock_plan: Callable[[BudgetInputs], PoolPlan] | None = None


class ServerArgsReplay(Protocol):
    """One served release's launch_server parser and server-args resolution, run offline."""

    release: str

    def parse_launch(self, launch: Sequence[str]) -> Any:
        """The release's own ``launch_server`` parser applied to ``launch``; bad flags raise
        :class:`PlanError`."""

    def resolve(self, server_args: Any, device: DeviceSpec) -> ResolvedLaunch:
        """The release's decisions for ``server_args`` on ``device``; its refusals raise
        ``ValueError`` (one line)."""

    def kv_dtype(
        self, launch: ResolvedLaunch, model_config: Any, *, is_draft: bool, target_kv_dtype: Any
    ) -> str:
        """The torch dtype name of a runner's KV pool (target, or draft after the target)."""

    def pool_prices(self, launch: ResolvedLaunch, device: DeviceSpec) -> PoolPrices | None:
        """Every pool of the launch priced by the release's own pool code; None: priced from
        the model geometry (:mod:`sglang_specinit.specs`)."""


def refuse_unpriced_model(target_mc: Any) -> None:
    """Mamba/linear-attention hybrids: their state pool (handle_max_mamba_cache) is not priced
    offline."""
    if is_linear_attention_hybrid(target_mc):
        raise BudgetError(
            f"{target_mc.hf_config.architectures[0]}: mamba/linear-attention state is not "
            "priced by the offline planner"
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
            target_mc = _model_config(ModelConfig.from_server_args, server_args)
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


def _same_dir(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _weights(
    algorithm: str,
    target_mc: Any,
    draft_mc: Any,
    model_path: str,
    draft_path: str,
    layouts: tuple[ShardLayout, ShardLayout],
) -> WeightSplit:
    """Weight bytes of target and draft on one rank, shared tensors counted once."""
    import torch

    target_layout, draft_layout = layouts
    # The target's own notes are _build_plan's; only the draft's are added here.
    target, _ = sizes_on_rank(read_checkpoint_sizes(model_path), target_mc.hf_config, target_layout)
    elt = torch.tensor([], dtype=draft_mc.dtype).element_size()
    names = shared_tensor_names(algorithm, draft_mc.hf_config)
    estimate = {
        n: rank_vocab_table_bytes(draft_mc.hf_config, elt, draft_layout.embed_tp_size)
        for n in names
    }
    mtp_layers = int(draft_mc.num_nextn_predict_layers or 0)
    if algorithm == "EAGLE" and mtp_layers > 0 and _same_dir(model_path, draft_path):
        # An MTP draft read from the target's own checkpoint (DeepSeek-V3 / GLM NextN).
        prefixes = mtp_layer_prefixes(target_mc.hf_config, mtp_layers)
        return split_mtp_from_target(target, prefixes, estimate)
    # Any other draft loads its checkpoint in full, even when it is the target's directory.
    draft, draft_notes = sizes_on_rank(
        read_checkpoint_sizes(draft_path), draft_mc.hf_config, draft_layout
    )
    split = split_separate_draft(target, draft, names, estimate)
    return replace(split, notes=(*draft_notes, *split.notes))


def _model_config(build: Any, server_args: Any, **kwargs: Any) -> Any:
    """``ModelConfig.from_server_args``, with a malformed config reported as bad input."""
    path = kwargs.get("model_path") or server_args.model_path
    try:
        return build(server_args, **kwargs)
    except (AttributeError, KeyError, TypeError, OSError) as e:
        raise PlanError(f"SGLang cannot build a ModelConfig from {path}: {e}") from e


@contextlib.contextmanager
def _cuda_quantization_names() -> Iterator[None]:
    """Let ``ModelConfig`` accept quantization names only a CUDA build of SGLang registers.

    ``ModelConfig._verify_quantization`` checks the checkpoint's ``quant_method`` against
    ``QUANTIZATION_METHODS``, to which ``layers/quantization/__init__.py`` adds ``mxfp4`` only
    when ``is_cuda()``. The plan is for a CUDA server but may run on a CPU-only host, and only
    the name check runs here (no kernel is built), so the entry is added for the duration.
    """
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


def build_plan(
    server_args: Any, device: DeviceSpec, replay: ServerArgsReplay | None = None
) -> OfflinePlan:
    """The plans for ``server_args`` (``replay.parse_launch``'s result) on ``device``.

    ``replay`` is the installed release's server-args logic (default: 0.5.13.x's).
    """
    with _cuda_quantization_names():
        return _build_plan(server_args, device, replay or REPLAY_0_5_13)


def _build_plan(server_args: Any, device: DeviceSpec, replay: ServerArgsReplay) -> OfflinePlan:
    """Readings -> sizing inputs, the one place for every release: ``replay`` says what the
    release decided (fraction, speculative settings, parallel layout, KV dtypes) and, where
    it can (0.5.23), what each pool costs by that release's own pool code; the rest is
    checkpoint headers, :mod:`sglang_specinit.specs` (pool geometry otherwise) and the
    runtime's sizing path (``live_sizing.plan_from_readings``)."""
    from sglang.srt.configs.model_config import ModelConfig

    notes: list[str] = []
    # Refuse unsupported models from config.json alone: their ModelConfig may need more.
    check_supported(read_config_json(server_args.model_path, "--model-path"))
    launch = replay.resolve(server_args, device)
    target_mc = launch.target_model_config
    stock_fraction, new_fraction = launch.stock_fraction, launch.new_fraction

    spec_args = launch.args
    algorithm = spec_args.speculative_algorithm
    tp_size = int(spec_args.tp_size)
    attn_tp = launch.attn_tp_size
    layout = model_layout(spec_args, target_mc.hf_config, attn_tp)
    target_kv_dtype = replay.kv_dtype(launch, target_mc, is_draft=False, target_kv_dtype=None)
    # The release's own pool code where the replay runs it (0.5.23: the server's function).
    prices = replay.pool_prices(launch, device)
    if prices is not None:
        target_kv = prices.target_kv
    else:
        target_kv = kv_spec_from_model_config(
            target_mc,
            target_kv_dtype,
            attn_tp_size=attn_tp,
            num_layers=runner_layer_count(target_mc, is_draft=False),
            swa_full_tokens_ratio=spec_args.swa_full_tokens_ratio,
            server_args=launch.mla_server_args,
        )
    target_sizes, target_notes = sizes_on_rank(
        read_checkpoint_sizes(spec_args.model_path), target_mc.hf_config, layout
    )
    target_weight_bytes = target_sizes.total_bytes
    notes.extend(target_notes)

    draft: DraftSpec | None = None
    draft_path = spec_args.speculative_draft_model_path
    if algorithm is not None and algorithm != "NGRAM":
        # 0.5.14 sizes its draft reserve only when a draft path is set (model_runner.py:431).
        path_given = draft_path is not None
        if draft_path is None:
            # TpModelWorker falls back to the target's path (ModelConfig.from_server_args).
            draft_path = spec_args.model_path
            notes.append("no draft path: the draft is built from the target's checkpoint")
        draft_mc = _model_config(
            ModelConfig.from_server_args,
            launch.config_source,
            model_path=draft_path,
            model_revision=spec_args.speculative_draft_model_revision,
            is_draft_model=True,
        )
        draft_kv_dtype = replay.kv_dtype(
            launch, draft_mc, is_draft=True, target_kv_dtype=target_kv_dtype
        )
        if prices is not None:
            pools = prices.draft_pools
        else:
            # Draft runners apply the target's pool config (all-SWA MTP drafts get its split).
            pools = tuple(
                sized_by_target(pool, target_kv)
                for pool in draft_kv_pools(
                    algorithm,
                    draft_mc,
                    draft_kv_dtype,
                    attn_tp_size=attn_tp,
                    swa_full_tokens_ratio=spec_args.swa_full_tokens_ratio,
                    num_steps=int(spec_args.speculative_num_steps or 1),
                    multi_layer_eagle=bool(spec_args.enable_multi_layer_eagle),
                    server_args=launch.mla_server_args,
                )
            )
        layouts = (layout, draft_layout(spec_args, algorithm, draft_mc.hf_config, attn_tp))
        split = _weights(algorithm, target_mc, draft_mc, spec_args.model_path, draft_path, layouts)
        notes.extend(split.notes)
        if split.draft_shared_bytes and algorithm != "FROZEN_KV_MTP":
            notes.append(
                "upstream 0.5.14 sizes the pool while the draft's own embed/lm_head copies "
                f"({split.draft_shared_bytes / (1 << 30):.2f} GiB per rank) are still "
                "resident; they are freed after the pool exists and stay unused"
            )
        target_weight_bytes = split.target_bytes
        per_request, fixed = draft_extra_bytes(
            algorithm,
            draft_mc,
            target_mc,
            draft_kv_dtype,
            attn_tp_size=attn_tp,
            swa_full_tokens_ratio=spec_args.swa_full_tokens_ratio,
            page_size=int(spec_args.page_size),
            num_steps=int(spec_args.speculative_num_steps or 1),
            multi_layer_eagle=bool(spec_args.enable_multi_layer_eagle),
        )
        if prices is not None:
            fixed = prices.draft_fixed_bytes
            per_request = prices.draft_request_bytes
        draft = DraftSpec(
            algorithm=algorithm,
            kv_pools=pools,
            bytes_per_request=per_request,
            fixed_bytes=fixed,
            weight_bytes=split.draft_bytes,
            shared_weight_bytes=split.draft_shared_bytes,
            upstream_reserved_layers=(
                upstream_reserved_layers(algorithm, draft_mc) if path_given else 0
            ),
        )

    # The runtime's sizing path, fed what the plan read instead of a live process: no free
    # memory was read unless --resident-bytes gives it (then SGLang's own budget is f x free
    # minus those bytes); a plan below one page is reported, not refused. (Bytes -> GiB -> bytes
    # is exact: a power-of-two scaling.)
    readings = SizingReadings(
        pre_model_load_memory_gb=device.pre_load_free_bytes / (1024 * MIB),
        mem_fraction_static=new_fraction,
        available_bytes=(
            None
            if device.resident_bytes is None
            else int(new_fraction * device.pre_load_free_bytes) - device.resident_bytes
        ),
        target_kv=target_kv,
        target_weight_bytes=target_weight_bytes,
        draft=draft,
        page_size=int(spec_args.page_size),
        context_len=int(target_mc.context_len),
        max_total_tokens=spec_args.max_total_tokens,
        max_running_requests=spec_args.max_running_requests,
        dp_size=launch.dp_size,
    )
    base, ours = plan_from_readings(readings, refuse_too_few=False)
    release_stock = None
    if prices is not None and prices.stock_plan is not None:
        # Stock profiles without this package's measurement (its duplicates are resident).
        stock_base = replace(base, measured_resident_bytes=None)
        release_stock = ReportColumn(
            f"stock {replay.release}", prices.stock_plan(stock_base), stock_base
        )
    stock_inputs = _with_fraction(base, stock_fraction)
    reserve = None
    if stock_fraction != new_fraction:
        # The budget the 4/6 GiB speculative term took away (NGRAM gets none).
        reserve = int(new_fraction * device.pre_load_free_bytes) - int(
            stock_fraction * device.pre_load_free_bytes
        )
    return OfflinePlan(
        stock=ReportColumn(
            "stock 0.5.13.post1", stock_0_5_13_plan(stock_inputs), stock_inputs, reserve
        ),
        upstream=ReportColumn("upstream 0.5.14", upstream_0_5_14_plan(base), base),
        ours=ReportColumn("sglang-specinit", ours, base),
        tp_size=tp_size,
        device=device,
        algorithm=algorithm,
        model_path=spec_args.model_path,
        draft_model_path=draft_path,
        notes=tuple(notes),
        release_stock=release_stock,
    )


def _with_fraction(inputs: BudgetInputs, fraction: float) -> BudgetInputs:
    return replace(inputs, mem_fraction_static=fraction)


def plan_json(plan: OfflinePlan) -> dict[str, Any]:
    """``--json``: this package's plan at top level, the two SGLang rules as sub-objects."""
    data = plan.ours.to_dict(plan.tp_size)
    data["stock_0_5_13"] = plan.stock.to_dict(plan.tp_size)
    data["upstream_0_5_14"] = plan.upstream.to_dict(plan.tp_size)
    data["device"] = {"name": plan.device.name, "total_bytes": plan.device.total_bytes}
    data["speculative_algorithm"] = plan.algorithm
    data["model_path"] = plan.model_path
    data["speculative_draft_model_path"] = plan.draft_model_path
    data["plan_notes"] = list(plan.notes)
    return data
