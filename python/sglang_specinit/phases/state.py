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


def run_until(obj: Any, method_name: str, body: Callable[[], Any]) -> bool:
    """Run ``body`` until it calls ``obj.<method_name>``; that call and the rest are skipped.

    Returns True if the cut was reached. The instance-level override shadows the class method
    only for this object and is always removed afterwards.
    """
    setattr(obj, method_name, _raise_cut)
    try:
        body()
    except PhaseCut:
        return True
    finally:
        obj.__dict__.pop(method_name, None)
    return False
