"""The launcher-side launch checks on sglang 0.5.14 / 0.5.15: the core's field-reading table.

BEFORE ``ServerArgs.check_server_args`` (``server_args.py:6630`` in 0.5.14, ``:6551`` in
0.5.15), which ``Engine._launch_subprocesses`` runs in the launcher
(``entrypoints/engine.py:778`` / ``:790``) before any scheduler is spawned. ``ServerArgs`` is
still 0.5.13's dataclass, whose ``__post_init__`` resolves the fraction, page size and
algorithm aliases into the fields themselves, so 0.5.13's reading of them
(:mod:`sglang_specinit.dataclass_args.launch_checks`) is this release's too.
"""

from __future__ import annotations

from sglang_specinit.dataclass_args.launch_checks import HOOKS, NEW_METHODS, REQUIRES

__all__ = ["HOOKS", "NEW_METHODS", "REQUIRES"]
