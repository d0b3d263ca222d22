"""The adapter for sglang 0.5.13 and 0.5.13.post1: the whole phased speculative init.

These releases build the target worker completely (weights, KV pool, backends, graphs) before
the draft exists. This package splits every worker constructor into a weight-loading part plus
``alloc_memory_pool`` and ``init_backends`` and drives the four phases from the scheduler.

One module per SGLang area; each declares, as data (:mod:`sglang_specinit.hooks`), ``HOOKS``
(HookRegistry hooks), ``NEW_METHODS`` (phase methods added to classes that lack them) and
``REQUIRES`` (SGLang attributes its phases call), recorded by
:class:`sglang_specinit.patch_table.PatchTable` decorators on the functions they install
(``sglang-specinit patches --release 0.5.13.post1`` lists them all)::

    module              SGLang module(s) patched or read
    scheduler           managers.scheduler (Scheduler: drives the 4 phases)
    tp_worker           managers.tp_worker (TpModelWorker: weights-only constructor)
    model_runner        model_executor.model_runner, ..._kv_cache_mixin, pool_configurator
    model_config        configs.model_config (a draft's config never touches the target's)
    eagle               speculative.eagle_worker_v2 (EAGLE / EAGLE3 / NEXTN)
    standalone          speculative.standalone_worker_v2
    multi_layer_eagle   speculative.multi_layer_eagle_worker_v2
    dflash              speculative.dflash_worker (+ server_args' global args)
    frozen_kv_mtp       speculative.frozen_kv_mtp_worker
    server_args         server_args, arg_groups.speculative_hook (automatic fraction, bad draft)
    launch_checks       server_args (ServerArgs.check_server_args: bad flags, shards, draft fit)

``launch_policy`` decides which launches are phased; ``runtime_budget`` sizes the pools;
``state`` holds the cut mechanism shared by the phase modules; ``pool_probe`` prices a pool by
building it (the server's and the planner's one price source); ``planner_replay`` is this
release's server-args replay (and stock's sizing by the release's own code). This file only
declares the releases and the phase modules; ``hooks.adapter_patches`` reads their tables.
"""

from __future__ import annotations

RELEASES = ("0.5.13", "0.5.13.post1")

PHASE_MODULES = (
    "scheduler",
    "tp_worker",
    "model_runner",
    "model_config",
    "eagle",
    "standalone",
    "multi_layer_eagle",
    "dflash",
    "frozen_kv_mtp",
    "server_args",
    "launch_checks",
)
