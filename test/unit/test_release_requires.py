"""The guard checks each release's own form of what the adapter reads: ``sglang-specinit
patches --release`` and the plugin (``hooks.adapter_patches(adapter, release)``) add
``release_shims.release_requires`` to the phase tables, per API generation. No SGLang import
(the release is given)."""

from __future__ import annotations

import pytest
from sglang_specinit import sglang_0_5_23
from sglang_specinit.hooks import adapter_patches
from sglang_specinit.patch_listing import release_patches

KVC = "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator"
SCHEDULE = "sglang.srt.runtime_context.get_schedule"
PS = "sglang.srt.distributed.parallel_state_wrapper.ParallelState.attn_dp_size"
# The multimodal bag from 0.5.18, the resolving view from 0.5.19.
MM = {"sglang.srt.runtime_context.get_mm", "sglang.srt.mem_cache.kv_cache_configurator."
      "mm_runtime_reservation_gb"}  # fmt: skip
VIEW = "sglang.srt.arg_groups.overrides.resolving_view"


def required(release: str) -> set[str]:
    patches = adapter_patches(sglang_0_5_23, release)
    return {r.target for p in patches.values() for r in p.requires}


@pytest.mark.parametrize(
    ("release", "present", "absent"),
    [
        (
            "0.5.16",  # no schedule bag: its configurator's own server_args
            {f"{KVC}.ps", PS, f"{KVC}.server_args"},
            {SCHEDULE, f"{KVC}.attn_dp_size", f"{KVC}.fused_entry_bytes", *MM, VIEW},
        ),
        ("0.5.17", {f"{KVC}.ps", PS, SCHEDULE}, {f"{KVC}.server_args", *MM, VIEW}),
        ("0.5.18", {SCHEDULE, *MM}, {f"{KVC}.server_args", VIEW}),
        (
            "0.5.20",
            {f"{KVC}.ps", PS, SCHEDULE, *MM, VIEW},
            {f"{KVC}.attn_dp_size", f"{KVC}.fused_entry_bytes", f"{KVC}.server_args"},
        ),
        (
            "0.5.21",
            {f"{KVC}.attn_dp_size"},
            {f"{KVC}.ps", f"{KVC}.fused_entry_bytes"},
        ),
        (
            "0.5.23",
            {f"{KVC}.attn_dp_size", f"{KVC}.fused_entry_bytes", SCHEDULE, *MM, VIEW},
            {f"{KVC}.ps", f"{KVC}.server_args"},
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


def test_without_a_release_only_the_phase_tables() -> None:
    plain = {r.target for p in adapter_patches(sglang_0_5_23).values() for r in p.requires}
    assert f"{KVC}.ps" not in plain
    assert plain < required("0.5.20") and plain < required("0.5.23")
