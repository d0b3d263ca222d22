"""The adapter for sglang 0.5.16 - 0.5.23: exact draft pricing on top of upstream's phased init.

These releases load both models before sizing the KV pools; this adapter prices the draft's
pools by building them (its own geometry and dtype, one pool per multi-layer runner, the
frozen-KV stand-in), binds the draft's duplicate embed/lm_head before profiling and runs the
launch checks in the launcher. What differs between its releases is one table:
``release_shims.RELEASE_TABLE``. ``sglang-specinit patches`` lists every patch target.
"""

from __future__ import annotations

from sglang_specinit.generation import AdapterGeneration
from sglang_specinit.sglang_0_5_23.release_shims import RELEASE_TABLE, release_requires

GENERATION = AdapterGeneration(
    package=__name__,
    releases=tuple(RELEASE_TABLE),
    phase_modules=("scheduler", "runtime_budget", "eagle", "launch_checks"),
    sglang_phases_init=True,
    requires_by_release=release_requires,
    deepseek_v4_releases=("0.5.20", "0.5.21", "0.5.22", "0.5.23"),
)
