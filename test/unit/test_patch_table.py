"""``PatchTable``, the recording decorator the phase modules declare their patch with (on 0.5.23's);
``sglang-specinit patches``: the adapters' tables, each function at its line, no SGLang import."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from harness.planner_cli import run_cli
from sglang_specinit import compat, sglang_0_5_23
from sglang_specinit.hooks import Hook, Requires, adapter_patches, group_by_module
from sglang_specinit.patch_listing import release_patches
from sglang_specinit.patch_table import PatchTable
from sglang_specinit.phased import early_binding
from sglang_specinit.sglang_0_5_23 import launch_checks, runtime_budget, scheduler

PHASES = {"scheduler": scheduler, "runtime_budget": runtime_budget, "early_binding": early_binding}
SGLANG = {
    "SCHED": "sglang.srt.managers.scheduler",
    "KVC": "sglang.srt.mem_cache.kv_cache_configurator",
    "POOL": "sglang.srt.model_executor.pool_configurator",
    "RUNNER": "sglang.srt.model_executor.model_runner",
    "EAGLE": "sglang.srt.speculative.eagle_worker_v2",
    "MULTI": "sglang.srt.speculative.multi_layer_eagle_worker_v2",
    "STANDALONE": "sglang.srt.speculative.standalone_worker_v2",
    "BASE_SPEC": "sglang.srt.speculative.base_spec_worker",
    "HYBRID": "sglang.srt.configs.hybrid_arch",
    "CONFIG": "sglang.srt.configs.model_config",
}
# The phase tables written out, one entry a row (phase, hook or requires, SGLang module, target,
# and a hook's function and params); "since" marks a name a phase calls, so that a release without
# it is refused by the guard instead of failing mid-sizing. What only some served releases have is
# a release_shims.release_requires row instead (test_each_generation_requires_its_own_form).
HAND_WRITTEN = """
scheduler hook SCHED Scheduler.init_memory_pools init_memory_pools
scheduler requires HYBRID mambaish_config since
scheduler requires CONFIG is_deepseek_v4 since
scheduler requires SCHED Scheduler.init_target_memory_pool since
scheduler requires BASE_SPEC BaseSpecWorker.draft_worker since
scheduler requires BASE_SPEC EagleDraftWorkerBase.draft_runners since
runtime_budget hook KVC KVCacheConfigurator._resolve_memory_pool_config
    resolve_memory_pool_config pre_model_load_memory
runtime_budget hook KVC KVCacheConfigurator.config_from_budget config_from_budget budget_bytes
runtime_budget hook KVC KVCacheConfigurator._apply_token_constraints apply_token_constraints
    token_capacity
runtime_budget requires KVC KVCacheConfigurator._profile_available_bytes
runtime_budget requires KVC KVCacheConfigurator.resolve_max_num_reqs
runtime_budget requires KVC KVCacheConfigurator._derive_pool_sizes
runtime_budget requires KVC KVCacheConfigurator._init_pools
runtime_budget requires RUNNER ModelRunner.init_kv_cache_configurator
runtime_budget requires POOL create_memory_pool_configurator
runtime_budget requires POOL DefaultPoolConfigurator.calculate_pool_sizes_from_max_tokens
runtime_budget requires POOL HybridSWAPoolConfigurator.calculate_pool_sizes_from_max_tokens
runtime_budget requires POOL MemoryPoolConfigurator.finalize_with_max_running_requests
runtime_budget requires POOL MemoryPoolConfig since
early_binding hook EAGLE EagleDraftWorker.init_token_map init_token_map
early_binding hook EAGLE EagleDraftWorker.init_lm_head init_lm_head
early_binding hook MULTI MultiLayerEagleDraftWorker.init_lm_head init_lm_head
early_binding requires EAGLE EagleDraftWorker.alloc_memory_pool
early_binding requires MULTI MultiLayerEagleDraftWorker.alloc_memory_pool
early_binding requires STANDALONE StandaloneDraftWorker
""".replace("\n    ", " ")


def hand_written(phase: str) -> tuple[tuple, tuple, tuple]:
    hooks, requires = [], []
    for row in HAND_WRITTEN.strip().split("\n"):
        name, entry, module, target, *rest = row.split()
        if name == phase and entry == "hook":
            fn, *params = rest
            hooks.append(
                Hook(SGLANG[module], target, getattr(PHASES[phase], fn), params=tuple(params))
            )
        elif name == phase:
            requires.append(Requires(SGLANG[module], target))
    return tuple(hooks), (), tuple(requires)


def test_recorded_tables_are_the_hand_written_ones_as_plain_data() -> None:
    from sglang_specinit.hooks import adapter_new_methods

    for phase, module in PHASES.items():
        assert (module.HOOKS, module.NEW_METHODS, module.REQUIRES) == hand_written(phase), phase
    # What compat checks and applies: the adapter's patch per SGLang module, in the same order.
    checks = (launch_checks.HOOKS, launch_checks.NEW_METHODS, launch_checks.REQUIRES)
    tables = [*map(hand_written, PHASES), checks]
    expected = group_by_module(*(sum(column, ()) for column in zip(*tables, strict=True)))
    actual = adapter_patches(sglang_0_5_23)
    assert actual == expected
    assert list(actual) == list(expected)
    # Without a release only the phase tables: no generation's own form.
    plain = {r.target for p in actual.values() for r in p.requires}
    assert f"{CFG}.ps" not in plain
    assert plain < required("0.5.20") and plain < required("0.5.23")
    # 0.5.23's adapter tables are plain data.
    patches = adapter_patches(sglang_0_5_23, "0.5.23")
    # Besides the phase tables' modules: launch checks (server_args, overrides); the schedule /
    # multimodal bags, a DeepSeek-V4 target, a hybrid target's stash (runtime_context) read.
    launch = ("server_args", "arg_groups.overrides", "runtime_context")
    assert set(patches) == {*SGLANG.values(), *(f"sglang.srt.{m}" for m in launch)}
    assert adapter_new_methods(sglang_0_5_23) == []  # 0.5.23 has every phase method itself
    # 0.5.18's dataclass ServerArgs has no resolving_view: its launch checks read the fields.
    assert "sglang.srt.arg_groups.overrides" not in adapter_patches(sglang_0_5_23, "0.5.18")


def test_decorators_return_the_function_record_bottom_up_and_refuse_what_does_not_fit() -> None:
    """``adds`` records a method under its own or the given name; a second target, or params the
    function lacks, are refused at declaration."""
    patch = PatchTable("some.module")

    def step(original, self, x, *, flag=False):
        return original(self, x)

    def alloc_memory_pool(self):
        return None

    def draft_init_backends(self):
        return None

    def before(self, budget):
        return None

    assert patch.around("A.step", params=("x",))(step) is step
    assert patch.calls("A.helper", "B", module="other.module")(step) is step
    patch.requires("A.size")
    assert patch.adds("A")(alloc_memory_pool) is alloc_memory_pool
    patch.adds("A", "init_backends")(draft_init_backends)
    # One function added to a second class (as a worker that only delegates shares them).
    patch.adds("B", "alloc_memory_pool", module="other.module")(alloc_memory_pool)
    hooks, new_methods, requires = patch.tables()
    assert hooks == (Hook("some.module", "A.step", step, params=("x",)),)
    assert [r.target for r in requires] == [
        "other.module.A.helper",
        "other.module.B",
        "some.module.A.size",
    ]
    assert [(m.target, m.fn) for m in new_methods] == [
        ("some.module.A.alloc_memory_pool", alloc_memory_pool),
        ("some.module.A.init_backends", draft_init_backends),
        ("other.module.B.alloc_memory_pool", alloc_memory_pool),
    ]
    with pytest.raises(ValueError, match="some.module.A.size is declared twice"):
        patch.requires("A.size")
    with pytest.raises(ValueError, match="some.module.A.init_backends is declared twice"):
        patch.adds("A", "init_backends")(alloc_memory_pool)
    # Params the hook function lacks fail at declaration; BEFORE's params come after self.
    with pytest.raises(TypeError, match="some.module.A.budget with params \\('tokens',\\)"):
        patch.around("A.budget", params=("tokens",))(step)
    assert patch.before("A.check", params=("budget",))(before) is before


# The guard checks each release's own form of what the adapter reads: ``patches --release`` and
# the plugin (``adapter_patches(adapter, release)``) add ``release_shims.release_requires`` to the
# phase tables, per API generation.

CFG = f"{SGLANG['KVC']}.KVCacheConfigurator"
SCHEDULE = "sglang.srt.runtime_context.get_schedule"
PS = "sglang.srt.distributed.parallel_state_wrapper.ParallelState.attn_dp_size"
# The multimodal bag from 0.5.18, the resolving view from 0.5.19.
MM = {"sglang.srt.runtime_context.get_mm", f"{SGLANG['KVC']}.mm_runtime_reservation_gb"}
VIEW = "sglang.srt.arg_groups.overrides.resolving_view"


def required(release: str) -> set[str]:
    patches = adapter_patches(sglang_0_5_23, release)
    return {r.target for p in patches.values() for r in p.requires}


@pytest.mark.parametrize(
    ("release", "present", "absent"),
    [
        (
            "0.5.16",  # no schedule bag: its configurator's own server_args
            {f"{CFG}.ps", PS, f"{CFG}.server_args"},
            {SCHEDULE, f"{CFG}.attn_dp_size", f"{CFG}.fused_entry_bytes", *MM, VIEW},
        ),
        ("0.5.17", {f"{CFG}.ps", PS, SCHEDULE}, {f"{CFG}.server_args", *MM, VIEW}),
        ("0.5.18", {SCHEDULE, *MM}, {f"{CFG}.server_args", VIEW}),
        (
            "0.5.20",
            {f"{CFG}.ps", PS, SCHEDULE, *MM, VIEW},
            {f"{CFG}.attn_dp_size", f"{CFG}.fused_entry_bytes", f"{CFG}.server_args"},
        ),
        (
            "0.5.21",
            {f"{CFG}.attn_dp_size"},
            {f"{CFG}.ps", f"{CFG}.fused_entry_bytes"},
        ),
        (
            "0.5.23",
            {f"{CFG}.attn_dp_size", f"{CFG}.fused_entry_bytes", SCHEDULE, *MM, VIEW},
            {f"{CFG}.ps", f"{CFG}.server_args"},
        ),
    ],
)  # fmt: skip
def test_each_generation_requires_its_own_form(
    release: str, present: set[str], absent: set[str]
) -> None:
    targets = required(release)
    assert present <= targets
    assert not absent & targets
    # The listing shows what the plugin checks for that release.
    listed = {r.target for p in release_patches(release).values() for r in p.requires}
    assert listed == targets


# ``sglang-specinit patches``

ROW = re.compile(
    r"^  (?P<entry>hook|adds|requires) +(?P<kind>[A-Z]+)? +(?P<target>\S+)"
    r"(?: +<- (?P<fn>\S+)  \((?P<module>[\w.]+):(?P<line>\d+)\))?$"
)


def listed(*argv: str) -> tuple[str, list[tuple]]:
    """(header, rows) of one ``patches`` run; a row is (sglang module, entry, kind, target,
    plugin function, its module, its line)."""
    code, out, _ = run_cli(["patches", *argv])
    assert code == 0
    header, *lines = out.splitlines()
    rows, module = [], None
    for line in lines:
        if not line.startswith(" "):
            module = line
            continue
        match = ROW.match(line)
        assert match, line
        g = match.groupdict()
        line_no = int(g["line"]) if g["line"] else None
        rows.append((module, g["entry"], g["kind"], g["target"], g["fn"], g["module"], line_no))
    return header, rows


@pytest.mark.parametrize("release", ["0.5.13.post1", "0.5.23"])
def test_lists_every_table_entry_where_its_function_is_defined(release: str) -> None:
    header, rows = listed("--release", release)
    # The same rows read from the adapter's tables (without the line numbers).
    adapter = compat.load_adapter(compat.decide_for_version(release).adapter)
    expected = []
    for module, patch in adapter_patches(adapter, release).items():
        expected += [
            (module, "hook", h.kind, h.qualname, h.fn.__qualname__, h.fn.__module__)
            for h in patch.hooks
        ]
        expected += [
            (module, "adds", None, f"{m.class_name}.{m.name}", m.fn.__qualname__, m.fn.__module__)
            for m in patch.new_methods
        ]
        expected += [(module, "requires", None, r.qualname, None, None) for r in patch.requires]
    assert [row[:6] for row in rows] == expected
    hooks = sum(row[1] == "hook" for row in rows)
    assert header.startswith(f"sglang {release}: adapter sglang_specinit.sglang_0_5_")
    assert f" {hooks} hooks," in header
    # A function's line is its ``def`` or the first of its decorators (the next ``def`` is its).
    for _, _, _, target, fn, module, line_no in rows:
        if fn is not None:
            source = Path(importlib.util.find_spec(module).origin).read_text().splitlines()
            defs = [line for line in source[line_no - 1 :] if line.startswith("def ")]
            name = fn.rsplit(".", 1)[-1]
            assert source[line_no - 1].strip().startswith(("@", f"def {name}(")), (target, line_no)
            assert defs[0].startswith(f"def {name}("), (target, module, line_no)


def test_default_release_is_the_installed_one() -> None:
    assert listed() == listed("--release", version("sglang"))


def test_listing_imports_no_sglang_module() -> None:
    code = (
        "import contextlib, io, json, sys\n"
        "from sglang_specinit.planner.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    codes = [main(['patches', '--release', r]) for r in ('0.5.13.post1', '0.5.23')]\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('sglang.', 'torch')))\n"
        "loaded += ['sglang'] if 'sglang' in sys.modules else []\n"
        "print(json.dumps([codes, loaded]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert json.loads(out) == [[0, 0], []]
