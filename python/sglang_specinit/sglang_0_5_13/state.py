"""Shared state of a phased init: whether pools are being deferred, and the cut mechanism.

SGLang 0.5.13.x constructors run "load weights -> allocate pools -> build backends" in one go.
Rather than re-implement their first halves, the phased init lets SGLang's own constructor run
and stops it at the first call of the method that starts the next phase (``init_memory_pool``
for a ModelRunner, ``init_attention_backend`` for an EAGLE draft worker). Stopping is done by
an exception, so every ``with`` block the constructor is inside unwinds as it would normally.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

_local = threading.local()


class PhaseCut(BaseException):
    """Raised in place of the first method of a later phase.

    A BaseException so that a broad ``except Exception`` in SGLang cannot swallow it.
    """


def deferring_pools() -> bool:
    """True while the scheduler's weight-loading phases run (pools come later)."""
    return getattr(_local, "deferring", False)


@contextlib.contextmanager
def defer_pools() -> Iterator[None]:
    previous = deferring_pools()
    _local.deferring = True
    try:
        yield
    finally:
        _local.deferring = previous


def _raise_cut(*_args: Any, **_kwargs: Any) -> None:
    raise PhaseCut


def run_until(obj: Any, method_names: str | tuple[str, ...], body: Callable[[], Any]) -> bool:
    """Run ``body`` until it calls one of ``obj.<method_names>``; that call and the rest are
    skipped.

    Returns True if the cut was reached. The instance-level overrides shadow the class methods
    only for this object and are always removed afterwards.
    """
    names = (method_names,) if isinstance(method_names, str) else method_names
    for name in names:
        setattr(obj, name, _raise_cut)
    try:
        body()
    except PhaseCut:
        return True
    finally:
        for name in names:
            obj.__dict__.pop(name, None)
    return False


@contextlib.contextmanager
def preserved_cuda_graph_flag(server_args: Any) -> Iterator[None]:
    """Draft constructors turn ``disable_cuda_graph`` on and restore it at their end; a cut
    constructor never reaches its restore, so restore it here."""
    value = server_args.disable_cuda_graph
    try:
        yield
    finally:
        server_args.disable_cuda_graph = value
