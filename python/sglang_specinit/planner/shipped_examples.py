"""The planner's shipped examples (``planner/examples/<name>/example.json``: launch flags and a
GPU preset over tiny local checkpoints), for ``plan --example NAME``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sglang_specinit.planner.inputs import PlanError

EXAMPLES_DIR = Path(__file__).parent / "examples"
DEFAULT_EXAMPLE = "llama31-8b-eagle3"


@dataclass(frozen=True)
class Example:
    """A shipped example: the launch flags it stands for."""

    name: str
    description: str
    launch_args: tuple[str, ...]
    gpu: str | None


def list_examples() -> list[str]:
    return sorted(p.parent.name for p in EXAMPLES_DIR.glob("*/example.json"))


def example_refusal(name: str, replay: object) -> str | None:
    """Why ``replay`` cannot plan example ``name`` (``build_plan``'s first check), or None."""
    from sglang_specinit.budget import BudgetError
    from sglang_specinit.planner.plan import check_model_supported

    example = load_example(name)
    model_path = example.launch_args[example.launch_args.index("--model-path") + 1]
    try:
        check_model_supported(model_path, replay)
    except BudgetError as refusal:
        return str(refusal)
    return None


def load_example(name: str) -> Example:
    """Read ``examples/<name>/example.json``: snake_case flags (null: not passed), ``gpu``
    and ``description``; relative model paths resolve inside the example."""
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
    return Example(name, data.get("description", ""), tuple(args), data.get("gpu"))
