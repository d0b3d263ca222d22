"""The adapter for sglang 0.5.14 - 0.5.15.post1: exact draft pricing on upstream's first phased
init, with the duplicates bound before profiling and launch checks in the launcher."""

from __future__ import annotations

from sglang_specinit.generation import AdapterGeneration

GENERATION = AdapterGeneration(
    package=__name__,
    releases=("0.5.14", "0.5.15", "0.5.15.post1"),
    phase_modules=(
        "scheduler",
        "runtime_budget",
        "sglang_specinit.phased.early_binding",
        "sglang_specinit.dataclass_args.launch_checks",
    ),
    sglang_phases_init=True,
)
