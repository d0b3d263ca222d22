"""``sglang-specinit plan`` on the real sglang 0.5.14 / 0.5.15, without an Engine: a bad launch flag
is one line naming it, exit 2, before any pool is built (plan == server: ``test_eagle3_launch.py``;
the planner runs this release's replay: ``test_adapter_signatures.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from harness.launch.engine import server_args_to_cli
from harness.launch.release_suite import engine_kwargs
from harness.planner_cli import run_cli


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (["--speculative-num-stepz", "3"], "unrecognized arguments: --speculative-num-stepz 3"),
        (["--kv-cache-dtype", "fp9"], "argument --kv-cache-dtype: invalid choice: 'fp9'"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it(
    bad: list[str], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang_specinit.sglang_0_5_14 import planner_replay as release_0_5_14

    def no_pool_may_be_built(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a pool was priced for a launch with a bad flag")

    monkeypatch.setattr(release_0_5_14, "unloaded_runner", no_pool_may_be_built)
    line = run_cli(["plan", *server_args_to_cli(engine_kwargs("EAGLE3")), *bad]).refusal_line()
    assert line.startswith("sglang-specinit plan: error: ") and named in line, line


def test_the_probe_and_the_unloaded_runner_cover_every_field_of_the_pool_code() -> None:
    """The probe restores every attribute the pool building sets; the unloaded runner holds every
    field it reads."""
    import inspect
    import re

    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang_specinit.sglang_0_5_13.planner_replay import resolve_speculative
    from sglang_specinit.sglang_0_5_14.planner_replay import REPLAY, unloaded_runner
    from sglang_specinit.sglang_0_5_14.pool_probe import RUNNER_ATTRS

    # ModelRunnerKVCacheMixin's two pool-building methods (ModelRunner inherits them).
    methods = (ModelRunner._apply_memory_pool_config, ModelRunner._init_pools)
    sources = "\n".join(inspect.getsource(method) for method in methods)
    assert set(re.findall(r"self\.(\w+)\s*=[^=]", sources)) - set(RUNNER_ATTRS) == set()
    flags = server_args_to_cli(engine_kwargs("EAGLE3"))  # the tiny EAGLE3 Engine's
    server_args = resolve_speculative(REPLAY.parse_launch(flags))
    runner = unloaded_runner(server_args, ModelConfig.from_server_args(server_args), is_draft=False)
    read = set(re.findall(r"self\.([A-Za-z_]\w*)", sources))
    known = {*runner.__dict__, *RUNNER_ATTRS}
    missing = {name for name in read - known if not hasattr(ModelRunner, name)}
    assert read and missing == set()
