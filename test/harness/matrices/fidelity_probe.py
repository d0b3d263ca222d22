"""Each launch's ``ServerArgs`` and model configs as the installed SGLang builds them, plugin on
and off, one JSON per launch: ``python -m harness.matrices.fidelity_probe <request> <out_dir>``."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import json
import logging
import logging.handlers
import os
import random
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.releases import installed_row
from harness.reports.scheduler_report import _jsonable
from harness.reports.scheduler_report import write_json as _write

# 0.5.13.x: ServerArgs resolved in __post_init__ and the plugin's own phased init.
PHASES_ITSELF = getattr(installed_row(), "adapter", None) == "sglang_0_5_13"
# SGLANG_PLUGINS per mode (a whitelist naming no plugin: the plugin off).
MODES = {"on": "specinit", "off": "none-specinit-disabled"}
# Where the device's total memory is read (0.5.23 also imports it into its memory hook).
CAPACITY_TARGETS = ("sglang.srt.utils.common.get_device_memory_capacity",) + (
    () if PHASES_ITSELF else ("sglang.srt.arg_groups.memory_hook.get_device_memory_capacity",)
)


class StockInitReached(BaseException):
    """Raised by the recording ``init_tp_model_worker`` to stop ``init_model_worker`` there."""


def input_fields(server_args: Any) -> dict[str, Any]:
    """Every field of ``ServerArgs`` (0.5.13.x: a dataclass; 0.5.23: a ``msgspec`` record)."""
    if PHASES_ITSELF:
        return {f.name: getattr(server_args, f.name) for f in dataclasses.fields(server_args)}
    import msgspec

    return msgspec.structs.asdict(server_args)


def _sglang_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(("SGLANG_", "SGL_"))}


def install_hooks(capacity_mib: int, capability: tuple[int, int], sink: dict | None) -> None:
    """Doubles for the target device; with ``sink``, the fraction without the draft term."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookSource, HookType

    def simulated_cuda_capacity(original: Any, device: str | None = None) -> Any:
        if device is not None and str(device).startswith("cuda"):
            return float(capacity_mib)
        return original(device)

    def simulated_cuda_capability(original: Any, device: Any = None) -> tuple[int, int]:
        return (int(capability[0]), int(capability[1]))

    def fraction_probe(original: Any, self: Any, gpu_mem: Any) -> Any:
        before = copy.deepcopy(self)
        result = original(self, gpu_mem)
        if before.mem_fraction_static is None and before.speculative_algorithm is not None:
            before.speculative_algorithm = None
            original(before, gpu_mem)
            sink["fraction_without_spec_term"] = before.mem_fraction_static
            sink["gpu_mem_mib"] = gpu_mem
        return result

    hooks = {target: simulated_cuda_capacity for target in CAPACITY_TARGETS}
    hooks["torch.cuda.get_device_capability"] = simulated_cuda_capability
    if sink is not None:
        hooks["sglang.srt.server_args.ServerArgs._handle_gpu_memory_settings"] = fraction_probe
    source = HookSource(plugin_name="specinit-test-fidelity", dist_name=None)
    for target, hook in hooks.items():
        HookRegistry.register(target, hook, HookType.AROUND, source=source)
    HookRegistry.apply_hooks()


def _model_configs(server_args: Any) -> dict[str, Any]:
    from sglang.srt.configs.model_config import ModelConfig

    from harness.reports.config_snapshot import model_config_snapshot

    if PHASES_ITSELF:
        from sglang_specinit.model_facts import runner_layer_count
        from sglang_specinit.sglang_0_5_13.state import defer_pools

        model = spec = server_args
        building_draft: Any = defer_pools
    else:
        from sglang.srt.runtime_context import get_model, get_spec, publish

        publish(server_args, role="scheduler")
        model, spec = get_model(), get_spec()
        building_draft = contextlib.nullcontext
    out: dict[str, Any] = {}
    scheduler_config = ModelConfig.from_server_args(server_args)
    target = ModelConfig.from_server_args(
        server_args,
        model_path=model.model_path,
        model_revision=model.revision,
        is_draft_model=False,
    )
    out["target_before_draft"] = model_config_snapshot(target)
    out["scheduler_before_draft"] = model_config_snapshot(scheduler_config)
    algorithm = spec.speculative_algorithm
    if algorithm is None or str(algorithm).upper() == "NGRAM":
        return out
    # 0.5.23's scheduler builds the draft's config with the target's context length.
    context = {} if PHASES_ITSELF else {"context_length": target.context_len}
    with building_draft():
        draft = ModelConfig.from_server_args(
            server_args,
            model_path=spec.speculative_draft_model_path,
            model_revision=spec.speculative_draft_model_revision,
            is_draft_model=True,
            **context,
        )
    out["draft_model_path_used"] = draft.model_path
    out["draft"] = model_config_snapshot(draft)
    if PHASES_ITSELF:
        out["draft_layers_before_load"] = runner_layer_count(draft, is_draft=True)
    out["target_after_draft"] = model_config_snapshot(target)
    out["scheduler_after_draft"] = model_config_snapshot(scheduler_config)
    if PHASES_ITSELF:
        out["_scheduler_config"] = scheduler_config
    else:
        out["draft_shares_hf_config_with_target"] = draft.hf_config is target.hf_config
    return out


def _scheduler_check(server_args: Any, scheduler_config: Any) -> dict[str, Any]:
    """Step 4: the (hooked) ``Scheduler.init_model_worker`` up to its first worker call."""
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang_specinit.sglang_0_5_13.state import deferring_pools

    deferring: list[bool] = []  # per worker call: whether the plugin defers its pools
    scheduler = Scheduler.__new__(Scheduler)
    scheduler.server_args = server_args
    scheduler.model_config = scheduler_config
    scheduler.spec_algorithm = SpeculativeAlgorithm.from_string(server_args.speculative_algorithm)
    scheduler.ps = SimpleNamespace(tp_rank=0, pp_rank=0, dp_rank=None)
    fraction_before = server_args.mem_fraction_static

    def init_tp_model_worker() -> None:
        deferring.append(deferring_pools())
        raise StockInitReached

    scheduler.init_tp_model_worker = init_tp_model_worker
    reached = False
    try:
        Scheduler.init_model_worker(scheduler)
    except StockInitReached:
        reached = True
    return {
        "reached_init_tp_model_worker": reached,
        "deferring_pools_per_call": deferring,
        "phase_log_started": hasattr(scheduler, "_specinit_phase_log"),
        "mem_fraction_static_before": fraction_before,
        "mem_fraction_static_after": server_args.mem_fraction_static,
    }


def run_launch(path: Path, launch: dict[str, Any], mode: str, fraction_sink: dict) -> None:
    """One launch in this (forked) process: steps 1-4, written to ``path``, never raising."""
    from sglang.srt.server_args import prepare_server_args

    os.environ.update(launch.get("env", {}))
    if launch.get("cpu_engine"):
        os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
    else:
        os.environ.pop("SGLANG_USE_CPU_ENGINE", None)
    records = logging.handlers.BufferingHandler(capacity=1 << 30)
    records.setLevel(logging.DEBUG)
    # On the package loggers, not the root: prepare_server_args resets the root's handlers
    # (logging.basicConfig(force=True)).
    for name in ("sglang", "sglang_specinit"):
        logging.getLogger(name).addHandler(records)
    root = logging.getLogger()
    env_before = _sglang_env()
    result: dict[str, Any] = {"name": launch["name"], "mode": mode, "argv": launch["argv"]}
    step = "ServerArgs"
    # SGLang draws --random-seed from Python's RNG when it is not given: same draw in both modes.
    random.seed(0)
    try:
        parser_errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(parser_errors):
                server_args = prepare_server_args(list(launch["argv"]))
        except SystemExit as exc:  # argparse refused the command line, as launch_server would
            lines = parser_errors.getvalue().strip().splitlines() or [""]
            raise ValueError(f"launch_server exits with {exc.code}: {lines[-1]}") from None
        if not PHASES_ITSELF:
            server_args.resolve_once()
            server_args.check_server_args()
        root.setLevel(logging.INFO)  # prepare_server_args configured logging from --log-level
        # 0.5.13.x: every field after __post_init__; 0.5.23: resolved, and the operator's input.
        given = _jsonable(input_fields(server_args))
        if PHASES_ITSELF:
            result["server_args"] = given
        else:
            result["server_args"] = _jsonable(server_args.resolved_dict())
            result["server_args_input"] = given
        result["env_set_by_server_args"] = {
            k: v for k, v in _sglang_env().items() if env_before.get(k) != v
        }
        result.update(fraction_sink)
        step = "model configs"
        configs = _model_configs(server_args)
        scheduler_config = configs.pop("_scheduler_config", None)
        result.update(configs)
        if launch.get("scheduler_check"):  # 0.5.13.x only
            step = "scheduler check"
            result["scheduler_check"] = _scheduler_check(server_args, scheduler_config)
    except Exception as exc:  # reported, compared by the test
        result["error"] = {
            "step": step,
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": traceback.format_exc(),
        }
    # Every record of the plugin, and SGLang's own warnings and errors.
    result["records"] = [
        {"logger": r.name, "level": r.levelname, "message": r.getMessage()}
        for r in records.buffer
        if r.name.startswith("sglang_specinit") or r.levelname in ("WARNING", "ERROR")
    ]
    _write(path, result)


def _fork(child: Callable[..., None], *args: Any) -> int:
    """Run ``child(*args)`` in a forked process that exits 0, or 1 if it raised; its pid."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            child(*args)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid


def _wait(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def run_mode(request: dict[str, Any], mode: str, out_dir: Path) -> None:
    """Child: ``load_plugins()`` in ``mode``, then one grandchild per launch."""
    os.environ["SGLANG_PLUGINS"] = MODES[mode]
    from sglang.srt.plugins import load_plugins

    load_plugins()
    # Imported once, before the per-launch forks.
    import sglang.srt.configs.model_config  # noqa: F401

    if PHASES_ITSELF:
        import sglang_specinit.sglang_0_5_13.state  # noqa: F401

        import harness.geometry.specs  # noqa: F401

    fraction_sink: dict[str, Any] = {}
    sink = fraction_sink if mode == "off" and PHASES_ITSELF else None
    install_hooks(int(request["capacity_mib"]), tuple(request["capability"]), sink)
    for launch in request["launches"]:
        if mode not in launch.get("modes", MODES):
            continue
        path = out_dir / f"{launch['name']}.{mode}.json"
        code = _wait(_fork(run_launch, path, launch, mode, fraction_sink))
        if code != 0 and not path.exists():
            _write(path, {"name": launch["name"], "mode": mode, "crashed": code})


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    out_dir = Path(argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    # What `python -m sglang.launch_server` has imported when it calls load_plugins().
    import sglang.launch_server  # noqa: F401

    children = [_fork(run_mode, request, mode, out_dir) for mode in MODES]
    return 0 if all(_wait(pid) == 0 for pid in children) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
