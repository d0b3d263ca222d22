"""One live launch on the real sglang 0.5.21: the tiny EAGLE3 pair, plugin on, as a real
``sglang.Engine`` on device cpu (:mod:`harness.launch.launch_0_5_23`, kind ``EAGLE3``: target 2
layers x 2 KV heads x dim 16, an EAGLE3 draft with a reduced vocabulary).

The 0.5.21 Engine comes up with the plugin's sizing (the ``SPECINIT_MEMORY`` breakdown, not
stock's, with its rank fields read through ``release_shims.scheduler_ranks``), weights + every
pool fill the budget to [0.995, 1], and ``sglang-specinit plan --resident-bytes`` in this
environment (0.5.21's own server-args logic and pool code) plans what the server allocated
(the shared checks: :mod:`harness.launch.release_suite`; what is 0.5.21's own stays here).

Slow (``SPECINIT_TEST_SLOW=1``; the Engine ~75 s here, the planner ~25 s). What covers it in CI:
the same launch on the next release of this API generation
(``test/sglang_0_5_22/test_eagle3_launch.py``), and every hook target, required attribute and
0.5.21 difference checked on the real 0.5.21 wheel (``test_adapter_signatures.py`` here).
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

pytestmark = [
    pytest.mark.slow,
    pytest.mark.cpu_engine,
    pytest.mark.timeout(ENGINE_TIMEOUT_S * 2),
]


def test_the_0_5_21_engine_fills_the_budget(eagle3_on: Any) -> None:
    memory = assert_fills_the_budget_at_profile(eagle3_on)
    assert memory["sglang_version"] == "0.5.21"
    # Every label names the installed release (compat.installed_sglang_version), none 0.5.23.
    assert "[specinit] KV pools on sglang 0.5.21 (" in eagle3_on.log
    assert "sglang 0.5.23" not in eagle3_on.log


def test_plan_in_the_0_5_21_environment_equals_the_server(eagle3_on: Any) -> None:
    planned = plan_in_this_environment(eagle3_on)
    # The stock column is this release's own configurator, labelled as such.
    assert planned["sglang_version"] == "0.5.21"
    assert "stock_0_5_21" in planned and "stock_0_5_23" not in planned
    assert_plan_equals_server(planned, eagle3_on)
