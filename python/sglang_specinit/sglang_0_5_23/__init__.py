"""The adapter for sglang 0.5.16 - 0.5.23: exact draft pricing on top of upstream's phased init.

Releases differ by one row of ``release_shims.RELEASE_TABLE``; ``sglang-specinit patches``
lists every patch target.
"""

from __future__ import annotations

from sglang_specinit.generation import AdapterGeneration
from sglang_specinit.sglang_0_5_23.release_shims import RELEASE_TABLE, release_requires

GENERATION = AdapterGeneration(
    package=__name__,
    releases=tuple(RELEASE_TABLE),
    phase_modules=(
        "scheduler",
        "runtime_budget",
        "sglang_specinit.phased.early_binding",
        "launch_checks",
    ),
    sglang_phases_init=True,
    requires_by_release=release_requires,
    deepseek_v4_releases=tuple(r for r, row in RELEASE_TABLE.items() if row.deepseek_v4_pools),
)
