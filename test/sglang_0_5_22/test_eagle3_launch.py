"""One live launch on the real sglang 0.5.22: the tiny EAGLE3 pair, plugin on, as a real
``sglang.Engine`` on device cpu (:mod:`harness.launch.launch_0_5_23`, kind ``EAGLE3``: target 2
layers x 2 KV heads x dim 16, an EAGLE3 draft with a reduced vocabulary).

The 0.5.22 Engine comes up with the plugin's sizing (the ``SPECINIT_MEMORY`` breakdown, not
stock's), weights + every pool fill the budget to [0.995, 1], and ``sglang-specinit plan
--resident-bytes`` in this environment (0.5.22's own server-args logic and pool code) plans
what the server allocated (the shared checks: :mod:`harness.launch.release_suite`; what is
0.5.22's own stays here). The Engine ~60 s here, the planner ~40 s.
"""

from __future__ import annotations

from typing import Any

import pytest
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S
from harness.launch.release_suite import (
    assert_fills_the_budget_at_profile,
    assert_plan_equals_server,
    plan_in_this_environment,
)

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TIMEOUT_S * 2)]


def test_the_0_5_22_engine_fills_the_budget(eagle3_on: Any) -> None:
    memory = assert_fills_the_budget_at_profile(eagle3_on)
    assert memory["sglang_version"] == "0.5.22"
    # Every label names the installed release (compat.installed_sglang_version), none 0.5.23.
    assert "[specinit] KV pools on sglang 0.5.22 (" in eagle3_on.log
    assert "sglang 0.5.23" not in eagle3_on.log


def test_plan_in_the_0_5_22_environment_equals_the_server(eagle3_on: Any) -> None:
    planned = plan_in_this_environment(eagle3_on)
    # The stock column is this release's own configurator, labelled as such.
    assert planned["sglang_version"] == "0.5.22"
    assert "stock_0_5_22" in planned and "stock_0_5_23" not in planned
    assert_plan_equals_server(planned, eagle3_on)
