"""SGLang general-plugin entry point (group ``sglang.srt.plugins``, name ``specinit``).
SGLANG_SPECINIT_DISABLE=1 registers nothing; SGLANG_SPECINIT_STRICT=1 stops a launch whose
check fails."""

from __future__ import annotations

import logging
import os

from sglang_specinit import __version__, compat, hooks

logger = logging.getLogger(__name__)

_registered = False


class SpecInitCompatError(SystemExit):
    """STRICT mode's stop: a SystemExit, since ``load_plugins()`` logs any Exception and
    starts the server anyway."""


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def register() -> bool:
    """True when an adapter is active."""
    global _registered
    if _registered:
        return True
    if _truthy("SGLANG_SPECINIT_DISABLE"):
        logger.info("sglang-specinit %s disabled by SGLANG_SPECINIT_DISABLE", __version__)
        return False
    strict = _truthy("SGLANG_SPECINIT_STRICT")
    decision = compat.decide_for_version(compat.installed_sglang_version())
    if decision.adapter is None:
        if decision.not_served:
            logger.info("sglang-specinit %s: nothing to do, %s", __version__, decision.reason)
            return False
        message = f"sglang-specinit {__version__} is OFF: {decision.reason}"
        if strict:
            raise SpecInitCompatError(message)
        logger.warning(message)
        return False

    from sglang.srt.plugins import hook_registry

    # Hooks applied later, on import, are registered under this entry point's plugin name.
    source_var = getattr(hook_registry, "_current_plugin_source", None)
    adapter = compat.load_adapter(decision.adapter)
    try:
        state = compat.install(
            decision.sglang_version or "",
            hooks.adapter_patches(adapter, decision.sglang_version),
            source=source_var.get() if source_var is not None else None,
            strict=strict,
        )
    except compat.CompatError as exc:
        raise SpecInitCompatError(str(exc)) from exc
    _registered = True
    if state.problems:
        return False
    logger.info(
        "sglang-specinit %s active on sglang %s: %d SGLang modules patched, %d more when imported",
        __version__,
        decision.sglang_version,
        len(state.patched),
        len(state.patches) - len(state.patched),
    )
    return True
