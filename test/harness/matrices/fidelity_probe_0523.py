"""Each launch's server arguments and model configs built as sglang 0.5.23 does, plugin on, off.

``python -m harness.matrices.fidelity_probe_0523 <request.json> <out_dir>``, as the 0.5.13 probe:
(1) ``prepare_server_args``, ``resolve_once()``, ``check_server_args()``; (2) the target's
``ModelConfig`` after ``publish``; (3) the draft's, then the target's again (its pool sizing)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import sys
import traceback
from pathlib import Path
from typing import Any

from harness.matrices.fidelity_probe import (
    MODES,
    _jsonable,
    _Records,
    _sglang_env,
    _wait,
    _write,
)

CAPACITY_TARGETS = (
    "sglang.srt.utils.common.get_device_memory_capacity",
    "sglang.srt.arg_groups.memory_hook.get_device_memory_capacity",
)


def install_device_doubles(capacity_mib: int, capability: tuple[int, int]) -> None:
    """Test doubles for the recipes' device: its total memory, its compute capability."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookSource, HookType

    def simulated_cuda_capacity(original: Any, device: str | None = None) -> Any:
        if device is not None and str(device).startswith("cuda"):
            return float(capacity_mib)
        return original(device)

    def simulated_cuda_capability(original: Any, device: Any = None) -> tuple[int, int]:
        return (int(capability[0]), int(capability[1]))

    source = HookSource(plugin_name="specinit-test-fidelity", dist_name=None)
    for target in CAPACITY_TARGETS:
        HookRegistry.register(target, simulated_cuda_capacity, HookType.AROUND, source=source)
    HookRegistry.register(
        "torch.cuda.get_device_capability",
        simulated_cuda_capability,
        HookType.AROUND,
        source=source,
    )
    HookRegistry.apply_hooks()


def input_fields(server_args: Any) -> dict[str, Any]:
    """The operator's input: every field of the ``msgspec`` record, as plain data."""
    import msgspec

    return {k: _jsonable(v) for k, v in msgspec.structs.asdict(server_args).items()}


def _model_configs(server_args: Any) -> dict[str, Any]:
    """Steps (2) and (3) of the module docstring."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.runtime_context import get_model, get_spec, publish

    from harness.reports.config_snapshot import model_config_snapshot

    publish(server_args, role="scheduler")
    out: dict[str, Any] = {}
    scheduler_config = ModelConfig.from_server_args(server_args)
    target = ModelConfig.from_server_args(
        server_args,
        model_path=get_model().model_path,
        model_revision=get_model().revision,
        is_draft_model=False,
    )
    out["target_before_draft"] = model_config_snapshot(target)
    out["scheduler_before_draft"] = model_config_snapshot(scheduler_config)
    spec = get_spec()
    algorithm = spec.speculative_algorithm
    if algorithm is None or str(algorithm).upper() == "NGRAM":
        return out
    draft = ModelConfig.from_server_args(
        server_args,
        model_path=spec.speculative_draft_model_path,
        model_revision=spec.speculative_draft_model_revision,
        is_draft_model=True,
        context_length=target.context_len,
    )
    out["draft_model_path_used"] = draft.model_path
    out["draft"] = model_config_snapshot(draft)
    out["target_after_draft"] = model_config_snapshot(target)
    out["scheduler_after_draft"] = model_config_snapshot(scheduler_config)
    out["draft_shares_hf_config_with_target"] = draft.hf_config is target.hf_config
    return out


def run_launch(launch: dict[str, Any], mode: str) -> dict[str, Any]:
    """One launch in this (forked) process: steps 1-3, never raising."""
    from sglang.srt.server_args import prepare_server_args

    os.environ.update(launch.get("env", {}))
    records = _Records()
    for name in ("sglang", "sglang_specinit"):
        logging.getLogger(name).addHandler(records)
    env_before = _sglang_env()
    result: dict[str, Any] = {"name": launch["name"], "mode": mode, "argv": launch["argv"]}
    step = "ServerArgs"
    random.seed(0)  # an unset --random-seed is drawn from Python's RNG: same draw both modes
    try:
        parser_errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(parser_errors):
                server_args = prepare_server_args(list(launch["argv"]))
        except SystemExit as exc:  # argparse refused the command line, as launch_server would
            lines = parser_errors.getvalue().strip().splitlines() or [""]
            raise ValueError(f"launch_server exits with {exc.code}: {lines[-1]}") from None
        server_args.resolve_once()
        server_args.check_server_args()
        logging.getLogger().setLevel(logging.INFO)
        result["server_args"] = _jsonable(server_args.resolved_dict())
        result["server_args_input"] = input_fields(server_args)
        result["env_set_by_server_args"] = {
            k: v for k, v in _sglang_env().items() if env_before.get(k) != v
        }
        step = "model configs"
        result.update(_model_configs(server_args))
    except Exception as exc:  # reported, compared by the test
        result["error"] = {
            "step": step,
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": traceback.format_exc(),
        }
    result["records"] = [
        r
        for r in records.records
        if r["logger"].startswith("sglang_specinit") or r["level"] in ("WARNING", "ERROR")
    ]
    return result


def run_mode(request: dict[str, Any], mode: str, out_dir: Path) -> None:
    """Child: ``load_plugins()`` in ``mode``, then one grandchild per launch."""
    os.environ["SGLANG_PLUGINS"] = MODES[mode]
    from sglang.srt.plugins import load_plugins

    load_plugins()
    import sglang.srt.configs.model_config  # noqa: F401  (imported by every launch)

    install_device_doubles(int(request["capacity_mib"]), tuple(request["capability"]))
    for launch in request["launches"]:
        if mode not in launch.get("modes", MODES):
            continue
        path = out_dir / f"{launch['name']}.{mode}.json"
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _write(path, run_launch(launch, mode))
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        code = _wait(pid)
        if code != 0 and not path.exists():
            _write(path, {"name": launch["name"], "mode": mode, "crashed": code})


def main(argv: list[str]) -> int:
    import json

    request = json.loads(Path(argv[0]).read_text())
    out_dir = Path(argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    # A GPU launch: SGLang decides is_cpu() at import time.
    os.environ.pop("SGLANG_USE_CPU_ENGINE", None)
    import sglang.launch_server  # noqa: F401  (what launch_server has imported at load_plugins)

    children = {}
    for mode in request.get("modes", list(MODES)):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                run_mode(request, mode, out_dir)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children[mode] = pid
    codes = {mode: _wait(pid) for mode, pid in children.items()}
    return 0 if all(c == 0 for c in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
