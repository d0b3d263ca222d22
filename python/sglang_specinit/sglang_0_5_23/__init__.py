"""The adapter for sglang 0.5.23: exact draft pricing on top of upstream's phased init.

0.5.23 already loads both models before sizing the KV pools (upstream's phased init stays as
it is). What it still gets wrong about the draft, and what this package changes:

    gap in 0.5.23                                   module here
    draft KV priced at the target's geometry        runtime_budget (configurator hook; every
                                                      pool priced by building it: pool_probe)
    ``num_nextn_predict_layers: 0`` reserves 0      runtime_budget (priced as allocated)
    frozen-KV MTP reserved phantom draft layers     runtime_budget (its 64-token pool only)
    multi-layer EAGLE: d = nnpl, not one pool per   draft_pricing (one pool per runner,
      runner; boundary-KV stash not budgeted          stash per request row)
    duplicate embed/lm_head resident at profiling   eagle (bound before profiling; the later
                                                      stock calls skipped once, so EAGLE3's
                                                      hot-token map stays)
    bad input found only on every rank, after the   launch_checks (refused in the launcher,
      weights loaded (or on the first forward)        before any rank starts)

One module per SGLang area; each declares ``HOOKS``, ``NEW_METHODS`` and ``REQUIRES`` as data
(:mod:`sglang_specinit.hooks`; scheduler, runtime_budget and eagle record them with
:class:`sglang_specinit.patch_table.PatchTable` decorators on the functions they install;
``sglang-specinit patches`` lists them all)::

    module          SGLang module(s) patched or read
    scheduler       managers.scheduler (Scheduler.init_memory_pools)
    runtime_budget  mem_cache.kv_cache_configurator (KVCacheConfigurator.
                    _resolve_memory_pool_config), model_executor.pool_configurator (read)
    eagle           speculative.eagle_worker_v2, speculative.multi_layer_eagle_worker_v2
    launch_checks   server_args (ServerArgs.check_server_args: bad flags, shards, draft fit;
                    run in the launcher only), arg_groups.overrides (read)
    launch_policy   (read only) which launches are priced; why others keep stock sizing
    draft_pricing   (read only) which draft runners own pools, fixed pools, stash rows
    pool_probe      (read only) prices a pool by building it with 0.5.23's pool code

0.5.21 and 0.5.22 are the same internal API generation (``runtime_context``) and are served
too: what differs (no ``draft_parallel_layout`` before 0.5.23; no fused draft entries, no
``--enable-kv-cache-sharding`` and no ``attn_dp_enabled`` / ``num_dp_ranks`` names before
0.5.22) is decided in ``release_shims``. So are 0.5.16 - 0.5.20, the ``ParallelState``
generation: their hooked bodies do the same steps and every required attribute exists; only
where ranks and widths live differs (the configurator's and scheduler's ``ps``, the layer
indices, publish), seven rows of one table, plus three planner rows for 0.5.19 (attention
widths, derived widths after publish, the capacity reader), not a package of its own: every
phase module here runs on all of them unchanged. 0.5.16 - 0.5.18 keep 0.5.15's dataclass
``ServerArgs``
(resolved into its fields by ``__post_init__``): its launch checks read the fields
(``release_shims.has_resolving_view``) and their plans run ``dataclass_replay``; 0.5.16 and
0.5.17 also reserve nothing for a multimodal runtime and have no draft KV dtype flag, and
0.5.16 publishes no configuration bags: its configurator sizes from its own ``server_args``
(``release_shims.schedule_of``). 0.5.14-0.5.15.post1
configure pools from the ModelRunner and have their own adapter (``sglang_0_5_14``).

This file only declares the releases and the phase modules; ``hooks.adapter_patches`` reads
their tables.
"""

from __future__ import annotations

# Two API generations (ParallelState: 0.5.16 - 0.5.20; runtime_context: 0.5.21 - 0.5.23); what
# differs between them: release_shims.
RELEASES = ("0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")

PHASE_MODULES = ("scheduler", "runtime_budget", "eagle", "launch_checks")

# What the adapter reads in each generation's own form, checked with the phase tables.
from sglang_specinit.sglang_0_5_23.release_shims import release_requires  # noqa: E402, F401
