"""SGLang general-plugin entry point (group ``sglang.srt.plugins``, name ``specinit``).

SGLang 0.5.13.x calls ``load_plugins()`` in the launcher, in ``Engine`` and in every scheduler
process, then applies registered hooks with ``HookRegistry``. ``register`` checks the installed
sglang first and registers all hooks or none.

    target                                       hook / new method           why
    Scheduler.init_model_worker                  around + 3 phase methods    drives the 4 phases
    TpModelWorker.__init__                       around + alloc/backends     weights-only ctor
    ModelRunner.initialize                       around + alloc/backends     stop before the pool
    ModelRunnerKVCacheMixin._resolve_memory...   around                      target + draft sizing
    EagleDraftWorker.__init__ / EAGLEWorkerV2    around + alloc/backends     draft loads only
    StandaloneDraftWorker.__init__               around + alloc/backends     draft loads only
    MultiLayerEagleDraftWorker.__init__ / V2     around + alloc/backends     N runners, h-state
    DFlashWorker                                 alloc/backends              exact draft price
    FrozenKVMTPWorker.__init__                   around + alloc/backends     binds target KV late
    ServerArgs._handle_gpu_memory_settings       around                      no flat 4/6 GB guess
    speculative_hook.handle_speculative_decoding before                      clear bad-draft error
    ServerArgs.check_server_args                 before (launch_checks)      bad flags/shards/draft

Environment:
    SGLANG_SPECINIT_DISABLE=1   register nothing (SGLang's SGLANG_PLUGINS whitelist works too)
    SGLANG_SPECINIT_STRICT=1    stop the launch instead of warning when the check fails
"""

from __future__ import annotations

import logging
import os

from sglang_specinit import __version__, compat
from sglang_specinit.sglang_0_5_13 import (
    dflash,
    eagle,
    frozen_kv_mtp,
    launch_checks,
    model_runner,
    multi_layer_eagle,
    scheduler,
    server_args,
    standalone,
    tp_worker,
)

logger = logging.getLogger(__name__)

PHASE_MODULES = (
    scheduler,
    tp_worker,
    model_runner,
    eagle,
    standalone,
    multi_layer_eagle,
    dflash,
    frozen_kv_mtp,
    server_args,
    launch_checks,
)

_registered = False


class SpecInitCompatError(SystemExit):
    """The installed sglang is not what the phased init was written for (STRICT mode).

    A SystemExit because SGLang's ``load_plugins()`` catches and logs any Exception a plugin
    raises and then starts the server anyway; STRICT mode is meant to stop the launch.
    """


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def hook_table() -> list[tuple[str, object, str]]:
    """(target, hook, kind) for every hook; kind is a HookType name."""
    table = []
    for module in PHASE_MODULES:
        table += [(target, hook, "AROUND") for target, hook in module.HOOKS]
        table += [(target, hook, "BEFORE") for target, hook in getattr(module, "BEFORE_HOOKS", ())]
    return table


def new_method_table() -> list[tuple[str, str, object]]:
    return [method for module in PHASE_MODULES for method in module.NEW_METHODS]


def register() -> bool:
    """Register every hook, or none. Returns True when the phased init is active."""
    global _registered
    if _registered:
        return True
    if _truthy("SGLANG_SPECINIT_DISABLE"):
        logger.info("sglang-specinit %s disabled by SGLANG_SPECINIT_DISABLE", __version__)
        return False
    decision = compat.decide_for_version(compat.installed_sglang_version())
    if decision.upstream_fixed:
        logger.info("sglang-specinit %s: nothing to do, %s", __version__, decision.reason)
        return False
    problems = [] if decision.patch else [decision.reason]
    if decision.patch:
        methods = tuple((cls, name) for cls, name, _ in new_method_table())
        problems = compat.signature_problems(new_methods=methods)
    if problems:
        message = (
            f"sglang-specinit {__version__} patched NOTHING (speculative draft memory stays "
            f"unbudgeted): " + "; ".join(problems)
        )
        if _truthy("SGLANG_SPECINIT_STRICT"):
            raise SpecInitCompatError(message)
        logger.warning(message)
        return False

    import pkgutil

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for target, hook, kind in hook_table():
        HookRegistry.register(target, hook, HookType[kind])
    for class_path, name, fn in new_method_table():
        setattr(pkgutil.resolve_name(class_path), name, fn)
    _registered = True
    logger.info(
        "sglang-specinit %s active on sglang %s: %d hooks, %d phase methods",
        __version__,
        decision.sglang_version,
        len(hook_table()),
        len(new_method_table()),
    )
    return True
