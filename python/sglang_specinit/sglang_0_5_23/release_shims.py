"""Where the releases this adapter serves differ: sglang 0.5.22 and 0.5.23, one API generation.

Read from both wheels: every method the adapter hooks, every method its phases call and the
``runtime_context`` getters it reads are the same in 0.5.22 and 0.5.23 (same signatures; the
bodies of the hooked ones identical), except for the draft's parallel layout, which 0.5.23
adds. That one difference, and only it, is decided here:

    0.5.23                                           0.5.22
    ``ModelRunner.init_kv_cache_configurator(self,   ``init_kv_cache_configurator(self)``
    draft_parallel_layout=None)``                    (``model_executor/model_runner.py:643``)
    (``model_executor/model_runner.py:650``)
    ``KVCacheConfigurator.draft_parallel_layout``    no such field
    (``mem_cache/kv_cache_configurator.py:346``)     (``kv_cache_configurator.py:299-338``)
    the speculative worker's                         absent: an EAGLE3 draft under attention DP
    ``draft_parallel_layout``, handed to the         runs on the target's attention-TP group
    target's pool (``Scheduler.                      (``draft_owns_attention``,
    init_target_memory_pool``)                       ``speculative/spec_utils.py:766``), so its
                                                     attention TP is always the target's

``launch_policy`` reads the worker's layout with ``getattr(..., None)``, which is already
right on 0.5.22 (no layout: the attention-TP sizes agree). The configurator's constructor and
``init_kv_cache_configurator`` take the layout only on 0.5.23: callers go through
:func:`init_kv_cache_configurator` and :func:`configurator_layout_kwargs`.
"""

from __future__ import annotations

from functools import cache
from typing import Any

# The first release whose configurators and workers carry ``draft_parallel_layout``.
DRAFT_PARALLEL_LAYOUT_SINCE = (0, 5, 23)

# ``ModelRunner.init_kv_cache_configurator``'s parameters after ``self``, per release
# (test/sglang_0_5_22 and test/sglang_0_5_23 check them on the real wheels).
INIT_KV_CACHE_CONFIGURATOR_PARAMS = {
    "0.5.22": (),
    "0.5.23": ("draft_parallel_layout",),
}


@cache
def has_draft_parallel_layout() -> bool:
    """True on the installed release if it carries ``draft_parallel_layout`` (0.5.23)."""
    from sglang_specinit.compat import installed_sglang_version, release_key

    version = installed_sglang_version()
    key = release_key(version) if version is not None else None
    return key is not None and key[:3] >= DRAFT_PARALLEL_LAYOUT_SINCE


def init_kv_cache_configurator(runner: Any, draft_parallel_layout: Any = None) -> None:
    """``runner.init_kv_cache_configurator`` as the installed release takes it (0.5.22 has no
    layout: its draft shares the target's attention TP, so there is none to pass)."""
    if has_draft_parallel_layout():
        runner.init_kv_cache_configurator(draft_parallel_layout)
    else:
        runner.init_kv_cache_configurator()


def configurator_layout_kwargs(draft_parallel_layout: Any = None) -> dict[str, Any]:
    """The ``KVCacheConfigurator`` keyword for the layout on 0.5.23; none on 0.5.22."""
    if has_draft_parallel_layout():
        return {"draft_parallel_layout": draft_parallel_layout}
    return {}
