"""SGLang general-plugin entry point (group ``sglang.srt.plugins``, name ``specinit``).

SGLang calls ``load_plugins()`` in the launcher, in ``Engine`` and in every scheduler process.
``register`` picks the adapter for the installed sglang release and hands its patch to
:mod:`sglang_specinit.compat`, which patches each SGLang module when SGLang imports it (now, for
modules already imported), through SGLang's ``HookRegistry``. Nothing is imported on the
plugin's behalf: the launcher patches only its server-args code, a scheduler only the modules
of its own launch.

    release line            adapter package                 what it does
    0.5.13, 0.5.13.post1    sglang_specinit.sglang_0_5_13    the whole phased init (upstream
                                                            has none), see its __init__
    0.5.14 .. 0.5.15.post1  sglang_specinit.sglang_0_5_14    every pool priced by building it on
                                                            the live runners, early binding, on
                                                            upstream's first phased init
    0.5.16 .. 0.5.23        sglang_specinit.sglang_0_5_23    every pool priced by building it,
                                                            early embed/lm_head binding and
                                                            launch checks on top of upstream's
                                                            phased init (release_shims: where
                                                            0.5.16 .. 0.5.22 differ)
    0.5.13.post2,           none                            declined with one INFO line
    0.5.24 and later

Environment:
    SGLANG_SPECINIT_DISABLE=1   register nothing (SGLang's SGLANG_PLUGINS whitelist works too)
    SGLANG_SPECINIT_STRICT=1    stop the launch instead of warning when a check fails
"""

from __future__ import annotations

import logging
import os

from sglang_specinit import __version__, compat, hooks

logger = logging.getLogger(__name__)

_registered = False


class SpecInitCompatError(SystemExit):
    """The installed sglang is not what the phased init was written for (STRICT mode).

    A SystemExit because SGLang's ``load_plugins()`` catches and logs any Exception a plugin
    raises and then starts the server anyway; STRICT mode is meant to stop the launch.
    """


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def register() -> bool:
    """Install the adapter for the installed sglang. Returns True when it is active."""
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

    # SGLang sets the calling plugin's name here while it runs an entry point; hooks applied
    # later (when their module is imported) are registered under the same name.
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
