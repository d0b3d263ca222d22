"""The launcher-side launch checks on sglang 0.5.13.x: the core's field-reading table.

BEFORE ``ServerArgs.check_server_args``, which ``Engine._launch_subprocesses`` runs in the
launcher once ``__post_init__`` has resolved the fraction, page size, parallel layout and
algorithm aliases into the fields themselves (:mod:`sglang_specinit.dataclass_args.launch_checks`).
"""

from __future__ import annotations

from sglang_specinit.dataclass_args.launch_checks import HOOKS, NEW_METHODS, REQUIRES

__all__ = ["HOOKS", "NEW_METHODS", "REQUIRES"]
