"""The adapter for sglang 0.5.13 and 0.5.13.post1: the whole phased speculative init (every
worker constructor split into weights, ``alloc_memory_pool`` and ``init_backends``)."""

from __future__ import annotations

from sglang_specinit.generation import AdapterGeneration

GENERATION = AdapterGeneration(
    package=__name__,
    releases=("0.5.13", "0.5.13.post1"),
    phase_modules=(
        "scheduler",
        "tp_worker",
        "model_runner",
        "model_config",
        "draft_workers",
        "server_args",
        "sglang_specinit.dataclass_args.launch_checks",
    ),
    sglang_phases_init=False,
)
