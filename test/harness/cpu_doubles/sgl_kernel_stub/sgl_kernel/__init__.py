"""TEST DOUBLE for ``sgl_kernel`` on a GPU-less machine (CPU tests of sglang 0.5.16+ only)."""

from __future__ import annotations

from typing import Any

IS_SPECINIT_TEST_DOUBLE = True


class StubKernelCalled(RuntimeError):
    """A real sgl_kernel op was called; this CPU test double cannot run it."""


def _refuse(name: str) -> Any:
    def op(*_args: Any, **_kwargs: Any) -> None:
        raise StubKernelCalled(
            f"sgl_kernel.{name} was called, but sgl_kernel here is the CPU test double "
            "(test/harness/cpu_doubles/sgl_kernel_stub): sglang-kernel has no CPU build, so this "
            "op cannot run on this machine. Only init paths are testable on CPU."
        )

    op.__name__ = op.__qualname__ = name
    return op


def copy_all_layer_kv_cache_cpu(data_ptrs: Any, strides: Any, tgt_loc: Any, src_loc: Any) -> None:
    """The KV pool's warm-up copy (slot 0 onto slot 0) is a no-op; anything else refuses."""
    is_warm_up = (
        tgt_loc.numel() == src_loc.numel()
        and tgt_loc.numel() > 0
        and not bool(tgt_loc.any())
        and not bool(src_loc.any())
    )
    if not is_warm_up:
        _refuse("copy_all_layer_kv_cache_cpu")()


# The CPU ops sglang 0.5.20 and 0.5.23 import at module level; each refuses when called.
for _name in (
    "assign_draft_cache_locs_contiguous_cpu assign_extend_cache_locs_cpu"
    " assign_req_to_token_pool_cpu build_tree_kernel_efficient_cpu fill_accept_out_cache_loc_cpu"
    " fill_bonus_tokens_cpu rotate_input_ids_cpu verify_tree_greedy_cpu"
).split():
    globals()[_name] = _refuse(_name)
del _name
