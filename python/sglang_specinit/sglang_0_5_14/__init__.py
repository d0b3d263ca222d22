"""The adapter for sglang 0.5.14, 0.5.15 and 0.5.15.post1: exact draft pricing on upstream's
first phased init, whose sizing steps still live on the ``ModelRunner``.

The draft's pools are priced by building them with the release's own pool code, the draft's
duplicate embed/lm_head are bound before profiling, and the launch checks run in the launcher;
launches it does not price keep stock sizing with one WARNING (:mod:`.launch_policy`).
"""

from __future__ import annotations

from sglang_specinit.generation import AdapterGeneration

GENERATION = AdapterGeneration(
    package=__name__,
    releases=("0.5.14", "0.5.15", "0.5.15.post1"),
    phase_modules=("scheduler", "runtime_budget", "eagle", "launch_checks"),
    sglang_phases_init=True,
)
