"""The planner's bad-input error (:class:`PlanError`: one line, exit 2) and the checks that
need no SGLang, so the usual mistakes are reported before SGLang is imported."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, NoReturn

from sglang_specinit.launch_checks import check_mem_fraction_static


class PlanError(ValueError):
    """Bad planner input; the message is one line meant for the user."""


class RaisingParser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage, so every bad input is one line."""

    def error(self, message: str) -> NoReturn:
        raise PlanError(message)


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
    """What the raw flags and config.json files alone can tell."""
    # The launcher's own check and message (it refuses the same fractions).
    check_mem_fraction_static(mem_fraction_static)
    if model_path is None:
        raise PlanError("--model-path is required (or use --example NAME)")
    read_config_json(model_path, "--model-path")
    if draft_path is not None:
        read_config_json(draft_path, "--speculative-draft-model-path")


# Sizes SGLang divides by while it resolves or spawns a launch.
_DIVISOR_FLAGS = {
    "tp_size": "--tp-size",
    "pp_size": "--pp-size",
    "dp_size": "--dp-size",
    "page_size": "--page-size",
}


def check_divisor_sizes(server_args: Any) -> None:
    """A TP, PP, DP or page size below 1 fails every launch (a division by zero, or no
    scheduler to spawn), so it is refused with the flag to change."""
    for name, flag in _DIVISOR_FLAGS.items():
        value = getattr(server_args, name, None)
        if isinstance(value, int) and value < 1:
            raise PlanError(
                f"{flag} {value}: the launch fails (SGLang divides by it); pass 1 or more"
            )
