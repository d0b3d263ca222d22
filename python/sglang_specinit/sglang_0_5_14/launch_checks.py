"""Launch checks: ``ServerArgs`` is still a dataclass, so the core's field-reading table."""

from __future__ import annotations

from sglang_specinit.dataclass_args.launch_checks import HOOKS, NEW_METHODS, REQUIRES

__all__ = ["HOOKS", "NEW_METHODS", "REQUIRES"]
