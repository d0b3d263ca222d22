"""sglang 0.5.23 without the plugin, and what the plugin leaves untouched."""

from __future__ import annotations

import pytest
from harness.gpu import storage_identity
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TIMEOUT_S * 3)]

# Server args that name the run rather than configure it (ports, paths of temporary files).
VOLATILE_ARGS = {"port", "nccl_port", "dist_init_addr", "random_seed", "file_storage_path"}


@pytest.mark.launches(("EAGLE3", False), ("EAGLE3", True))
def test_stock_overshoots_with_an_eagle3_draft_the_plugin_changes_only_the_budget_and_binds(
    engine_runs,
) -> None:
    stock, ours = engine_runs("EAGLE3", False), engine_runs("EAGLE3", True)
    budget = int(0.5 * stock.pre_load_free_bytes)
    tokens = stock.runner("target")["max_total_num_tokens"]
    duplicates = ours.memory["stock_duplicate_bytes_at_profile"]
    # After init: profiled weights, less the duplicate embed freed right after, plus both pools.
    used = stock.resident_at_profile - duplicates + stock.kv_pool_bytes()
    assert used > budget
    # Over by the 64 B/token it under-reserves (128 of 192), less the duplicates it freed.
    assert abs((used - budget) - (tokens * 64 - duplicates)) < 1 << 10
    # The plugin changes only the budget.
    assert _differing(_comparable_args(ours), _comparable_args(stock)) == {}
    assert _geometry(ours.runner("target")) == _geometry(stock.runner("target"))
    assert tokens > ours.runner("target")["max_total_num_tokens"]
    requests = [run.report["scheduler"]["max_running_requests"] for run in (ours, stock)]
    assert requests[0] == requests[1]
    # The draft's embed is the target's storage when the pool is sized; stock's is its own.
    (plugin,) = ours.identity
    (stock_identity,) = stock.identity
    stock_after = stock_identity[storage_identity.AFTER_INIT][-1]
    # What 0.5.23 binds for an EAGLE3 draft of a reduced vocabulary: the embed only.
    assert list(stock_after["shared"].values()) == ["model.embed_tokens.weight"], stock_after
    assert storage_identity.identity_problems(plugin, stock_after) == []
    (problem,) = storage_identity.identity_problems(stock_identity, stock_after)
    assert "were still the draft's own storage" in problem, problem


def _comparable_args(run) -> dict:
    """The resolved server arguments; 0.5.23 also keeps private state on ServerArgs (the raw
    input, a cached ModelConfig object) whose repr names object addresses: left out."""
    args = {
        k: v
        for k, v in run.report["server_args"].items()
        if k not in VOLATILE_ARGS and not k.startswith("_")
    }
    # An empty record would pass every comparison (0.5.23 keeps fields off ``vars()``).
    assert args.get("model_path") and "speculative_algorithm" in args, sorted(args)[:20]
    return args


def _differing(a: dict, b: dict) -> dict:
    return {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}


def _geometry(runner: dict) -> dict:
    shape = ("class", "layer_num", "head_num", "head_dim", "v_head_dim", "dtype")
    geometry = {k: runner[k] for k in ("architecture", "weight_bytes")}
    return geometry | {k: runner["kv_pool"][k] for k in shape}


@pytest.mark.launches(("plain", False), ("plain", True))
def test_non_speculative_launch_is_identical_with_the_plugin_on_and_off(engine_runs) -> None:
    off, on = engine_runs("plain", False), engine_runs("plain", True)
    assert on.report["specinit_loaded"] and not off.report["specinit_loaded"]
    assert _differing(_comparable_args(on), _comparable_args(off)) == {}
    assert on.report["scheduler"] == off.report["scheduler"]
    geometries = [[_geometry(r) for r in run.report["model_runners"]] for run in (on, off)]
    assert geometries[0] == geometries[1]
    assert on.free_after_pools == off.free_after_pools
    assert on.memory is None and "[specinit]" not in on.log
