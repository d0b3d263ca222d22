"""The cut: 0.5.13's constructors load, allocate and build in one go, so SGLang's own constructor
runs and is stopped by an exception at the first method of the next phase; every ``with`` block
it is inside unwinds normally."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from sglang_specinit.pool_measure import attributes_restored

_local = threading.local()


class PhaseCut(BaseException):
    """A BaseException so that a broad ``except Exception`` in SGLang cannot swallow it."""


def deferring_pools() -> bool:
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
    """Run ``body`` until it calls one of ``obj.<method_names>``; True if the cut was reached."""
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
def logger_disabled(name: str) -> Iterator[None]:
    target = logging.getLogger(name)
    with attributes_restored(target, ("disabled",)):
        target.disabled = True
        yield
