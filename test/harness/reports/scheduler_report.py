"""Scheduler-side state reports for CPU tests: what the scheduler process itself saw at init."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.cpu_doubles import shims

REPORT_DIR_ENV = "SPECINIT_TEST_REPORT_DIR"
_SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
_INIT_MEMORY_POOL = (
    "sglang.srt.model_executor.model_runner_kv_cache_mixin.ModelRunnerKVCacheMixin.init_memory_pool"
)
_CONFIGURE_KV_CACHE_DTYPE = (
    "sglang.srt.model_executor.model_runner.ModelRunner.configure_kv_cache_dtype"
)
# Snapshots of the target runner's ModelConfig (first time each point is reached).
_target_config: dict[str, dict[str, Any]] = {}


def tensors_in(value: Any) -> list[Any]:
    """The tensors in ``value``: itself, or held in (nested) lists, tuples and dicts."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []


def _buffer_bytes(buffers: Any) -> int:
    """``numel * itemsize`` summed over a list of per-layer K (or V) buffers."""
    return sum(t.numel() * t.element_size() for t in tensors_in(buffers))


def kv_pool_summary(pool: Any) -> dict[str, Any] | None:
    """Geometry and byte size of one token-to-KV pool (MHA fields when the pool has them)."""
    if pool is None:
        return None
    out: dict[str, Any] = {"class": type(pool).__name__, "id": id(pool)}
    names = ("size", "page_size", "layer_num", "head_num", "head_dim", "v_head_dim")
    for name in (*names, "start_layer", "end_layer"):
        value = getattr(pool, name, None)
        out[name] = value if isinstance(value, (int, float, type(None))) else repr(value)
    out["dtype"] = str(getattr(pool, "store_dtype", getattr(pool, "dtype", None)))
    if hasattr(pool, "k_buffer"):
        out["k_bytes"] = _buffer_bytes(pool.k_buffer)
        out["v_bytes"] = _buffer_bytes(getattr(pool, "v_buffer", []))
    if hasattr(pool, "kv_buffer"):  # MLA pools keep one latent buffer per layer
        out["kv_buffer_bytes"] = _buffer_bytes(pool.kv_buffer)
    # Every tensor the pool object holds directly (works for MLA/hybrid pools too).
    out["storage_bytes"] = shims.storage_bytes(tensors_in(list(vars(pool).values())))
    return out


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def sglang_cell_size(runner: Any) -> float | None:
    """Bytes per token SGLang's own configurator charges for this runner's pool."""
    if getattr(runner, "token_to_kv_pool", None) is None:
        return None
    try:
        from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

        # 0.5.16+ configurators take the runner's KVCacheConfigurator, 0.5.13.x the runner.
        source = getattr(runner, "kv_cache_configurator", None) or runner
        return create_memory_pool_configurator(source)._cell_size
    except Exception as exc:  # a configurator that cannot be built must not hide the report
        return repr(exc)


def model_runner_summary(runner: Any) -> dict[str, Any]:
    """One ``ModelRunner``: role, architecture, token budget, weights and its KV pool."""
    model = getattr(runner, "model", None)
    tensors = {"parameter_bytes": [], "buffer_bytes": []}
    weights, hooked = 0, []
    if model is not None:
        weights = shims.storage_bytes([*model.parameters(), *model.buffers()])
        tensors = {
            "parameter_bytes": model.named_parameters(),
            "buffer_bytes": model.named_buffers(),
        }
        # Modules carrying a forward hook (``--forward-hooks`` registers them on each runner).
        hooked = sorted(name for name, module in model.named_modules() if module._forward_hooks)
    model_config = getattr(runner, "model_config", None)
    archs = getattr(getattr(model_config, "hf_config", None), "architectures", None) or [None]
    is_draft = bool(getattr(runner, "is_draft_worker", False))
    numbers = ("draft_model_idx", "max_total_num_tokens", "num_effective_layers", "start_layer")
    numbers += ("end_layer", "mem_fraction_static")
    return {
        "role": "draft" if is_draft else "target",
        "is_draft_worker": is_draft,
        "architecture": archs[0],
        "model_path": getattr(model_config, "model_path", None),
        **{k: getattr(runner, k, None) for k in numbers},
        "memory_pool_config": _jsonable(getattr(runner, "memory_pool_config", None)),
        "weight_bytes": weights,
        # ``name -> bytes`` of the model's parameters and buffers on this rank.
        **{k: {n: t.numel() * t.element_size() for n, t in named} for k, named in tensors.items()},
        "kv_pool": kv_pool_summary(getattr(runner, "token_to_kv_pool", None)),
        "forward_hooked_modules": hooked,
        "sglang_cell_size": sglang_cell_size(runner),
        "req_to_token_pool_id": id(getattr(runner, "req_to_token_pool", None)),
        "token_to_kv_pool_allocator_id": id(getattr(runner, "token_to_kv_pool_allocator", None)),
    }


def live_model_runners() -> list[Any]:
    """Every ``ModelRunner`` object alive in this process: target first, then drafts."""
    mr = sys.modules.get("sglang.srt.model_executor.model_runner")
    if mr is None:
        return []
    runners = [o for o in gc.get_objects() if issubclass(type(o), mr.ModelRunner)]
    runners.sort(key=lambda r: getattr(r, "draft_model_idx", None) or 0)
    return sorted(runners, key=lambda r: bool(getattr(r, "is_draft_worker", False)))


def scheduler_ranks(scheduler: Any | None) -> dict[str, int | None]:
    """This scheduler's tp/pp/dp/attn_tp/attn_dp ranks and gpu_id (None: not known yet)."""
    attrs = {k: f"{k}_rank" for k in ("tp", "pp", "dp", "attn_tp", "attn_dp")}
    attrs["gpu_id"] = "gpu_id"
    ps = getattr(scheduler, "ps", None)  # SGLang's ParallelState, set first in __init__
    if ps is not None or scheduler is None:
        return {key: getattr(ps, attr, None) for key, attr in attrs.items()}
    # 0.5.23 keeps them in its runtime context, as its launcher published them.
    try:
        from sglang.srt.runtime_context import get_device, get_parallel
    except ImportError:
        return dict.fromkeys(attrs)
    ranks: dict[str, int | None] = {}
    for key, attr in attrs.items():
        try:
            ranks[key] = getattr(get_device() if key == "gpu_id" else get_parallel(), attr)
        except (AttributeError, RuntimeError, ValueError):
            ranks[key] = None
    return ranks


def collect_scheduler_state(scheduler: Any | None) -> dict[str, Any]:
    """The JSON payload: process, scheduler numbers, runners, meter, applied hooks."""
    # Read before importing anything of the package below (a stock launch never imports it).
    specinit_loaded = any(m.startswith("sglang_specinit") for m in sys.modules)
    from harness.hook_state import hook_registry_state

    state: dict[str, Any] = {
        "pid": os.getpid(),
        "ranks": scheduler_ranks(scheduler),
        "sglang_plugins_env": os.environ.get("SGLANG_PLUGINS"),
        "specinit_loaded": specinit_loaded,
        "applied_hook_targets": sorted(hook_registry_state().applied),
    }
    spec_worker = getattr(scheduler, "draft_worker", None)  # None without a scheduler
    if scheduler is not None:
        spec = getattr(scheduler, "spec_algorithm", None)
        numbers = ("max_total_num_tokens", "max_running_requests", "max_req_len")
        numbers += ("max_req_input_len",)
        state["scheduler"] = {
            "spec_algorithm": getattr(spec, "name", None) if spec is not None else None,
            **{k: getattr(scheduler, k, None) for k in numbers},
        }
        server_args = getattr(scheduler, "server_args", None)
        if server_args is not None:  # 0.5.20+: a ``msgspec`` record with ``resolved_dict()``
            resolved = getattr(server_args, "resolved_dict", None)
            fields = resolved() if callable(resolved) else vars(server_args)
            # A callable field (0.5.23's ``custom_sigquit_handler``) by its name, not its address.
            named = {
                k: f"{v.__module__}.{v.__qualname__}"
                for k, v in fields.items()
                if callable(v) and hasattr(v, "__qualname__")
            }
            state["server_args"] = _jsonable({**fields, **named})
        state["draft"] = None
        if spec_worker is not None:  # its class, its draft's (EAGLE3) hot-token map
            hot = getattr(getattr(spec_worker, "_draft_worker", None), "hot_token_id", None)
            # ``--speculative-adaptive``: the step counts the controller holds a runtime state for.
            steps = getattr(getattr(spec_worker, "adaptive_controller", None), "_states", None)
            state["draft"] = {
                "worker_class": type(spec_worker).__name__,
                "hot_token_id_len": int(hot.numel()) if hot is not None else None,
                "adaptive_state_steps": sorted(steps) if steps is not None else None,
            }
    state["model_runners"] = [model_runner_summary(r) for r in live_model_runners()]
    if os.environ.get("SPECINIT_TEST_TENSOR_REPORT") == "1":  # the fidelity matrix's (c), (e)
        from harness.reports.fidelity_tensors import tensor_report

        state.update(tensor_report(live_model_runners(), spec_worker))
    state["target_config_before_pool"] = _target_config.get("before_pool")
    state["target_config_at_pool_sizing"] = _target_config.get("at_pool_sizing")
    shimmed = os.environ.get(shims.SHIMS_ENV) == "1"
    state["meter"] = shims.device_meter().snapshot() if shimmed else None
    return state


def write_report(state: dict[str, Any], name: str | None = None) -> Path | None:
    """Write ``state`` atomically to ``$SPECINIT_TEST_REPORT_DIR/<name>`` (or scheduler-<pid>)."""
    directory = os.environ.get(REPORT_DIR_ENV)
    if not directory:
        return None
    return write_json(Path(directory) / (name or f"scheduler-{os.getpid()}.json"), state)


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``path`` atomically (a sibling ``.tmp`` renamed into place)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=repr))
    tmp.replace(path)
    return path


def report_before_get_init_info(scheduler: Any, *args: Any, **kwargs: Any) -> None:
    """BEFORE hook on ``Scheduler.get_init_info``: snapshot the fully initialized scheduler."""
    write_report(collect_scheduler_state(scheduler))


def report_scheduler_init_failure(
    original: Callable[..., Any], scheduler: Any, *args: Any, **kwargs: Any
) -> Any:
    """AROUND hook on ``Scheduler.__init__``: on failure, record the traceback, re-raise."""
    try:
        return original(scheduler, *args, **kwargs)
    except BaseException:
        try:
            state = collect_scheduler_state(scheduler)
        except Exception:
            state = {"pid": os.getpid(), "collect_error": traceback.format_exc()}
        state["error"] = traceback.format_exc()
        write_report(state, f"scheduler-{os.getpid()}-error.json")
        raise


def _snapshot_target_config(point: str, runner: Any) -> None:
    if getattr(runner, "is_draft_worker", False) or point in _target_config:
        return
    from harness.reports.config_snapshot import model_config_snapshot

    _target_config[point] = model_config_snapshot(runner.model_config)


def snapshot_before_pool(result: Any, runner: Any, *args: Any, **kw: Any) -> None:
    """AFTER hook on ``configure_kv_cache_dtype`` (stock then sizes the pool)."""
    _snapshot_target_config("before_pool", runner)


def snapshot_at_pool_sizing(runner: Any, *args: Any, **kwargs: Any) -> None:
    """BEFORE hook on ``init_memory_pool``: the target's model config as its pool is sized."""
    _snapshot_target_config("at_pool_sizing", runner)


def report_hooks() -> list[tuple[str, Callable[..., Any], str]]:
    """(target, hook, HookType name) of the report hooks, for the harness's sitecustomize."""
    from harness.launch.sglang_release import sglang_release

    hooks: list[tuple[str, Callable[..., Any], str]] = [
        (f"{_SCHEDULER}.get_init_info", report_before_get_init_info, "BEFORE"),
        (f"{_SCHEDULER}.__init__", report_scheduler_init_failure, "AROUND"),
    ]
    # The config snapshots name 0.5.13.x methods (0.5.23 has neither the mixin module nor
    # configure_kv_cache_dtype); the fidelity matrix that reads them runs on 0.5.13.x only.
    if sglang_release()[:3] == (0, 5, 13):
        hooks.append((_CONFIGURE_KV_CACHE_DTYPE, snapshot_before_pool, "AFTER"))
        hooks.append((_INIT_MEMORY_POOL, snapshot_at_pool_sizing, "BEFORE"))
    return hooks
