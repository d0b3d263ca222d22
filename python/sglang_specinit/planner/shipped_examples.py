"""The planner's shipped examples: ``planner/examples/<name>/example.json`` read as launch flags.

Each example stands for one ``launch_server`` command line on one GPU preset, with tiny local
checkpoints (config.json plus safetensors headers) in its directory, so ``sglang-specinit plan
--example NAME`` runs offline. (The module is not called ``examples.py``: that name would sit
beside the ``examples/`` data directory.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sglang_specinit.planner.inputs import PlanError

EXAMPLES_DIR = Path(__file__).parent / "examples"
DEFAULT_EXAMPLE = "llama31-8b-eagle3"


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
