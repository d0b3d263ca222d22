"""The adapter for sglang 0.5.14 and 0.5.15: exact draft pricing on upstream's first phased init.

0.5.14 shipped upstream's phased init (PR #23862): ``Scheduler.init_memory_pools`` sizes the
target pool (``init_target_memory_pool``), then allocates the draft's pools on the same config
(``EagleDraftWorker.alloc_memory_pool``, which binds the draft's embed/lm_head after the target
pool was profiled). Its sizing code is still 0.5.13's shape: the steps live on the
``ModelRunner`` (``ModelRunnerKVCacheMixin._resolve_memory_pool_config``,
``_profile_available_bytes``, ``_apply_memory_pool_config``), and the configurators take the
runner (``create_memory_pool_configurator(model_runner)``). 0.5.15 is the same generation for
everything this package touches, and so is 0.5.15.post1 (a DSA-MTP seed fix for PD
disaggregation: every function this package hooks, calls or reads has 0.5.15's body). What they
still get wrong about the draft, and what this package changes::

    gap in 0.5.14 / 0.5.15                          module here
    draft KV priced at the target's geometry        runtime_budget (every pool priced by
      (``DefaultPoolConfigurator``: cell *=           building it with the release's own
      1 + d / n); hybrid-SWA targets reserve no       ``_apply_memory_pool_config``: pool_probe)
      draft KV (0.5.14) or d full target layers
      (0.5.15)
    ``num_nextn_predict_layers: 0`` reserves 0      runtime_budget (priced as allocated)
    duplicate embed/lm_head resident at profiling   eagle (0.5.23's module: bound before
                                                      profiling, later stock calls skipped once)
    bad input found only on every rank              launch_checks (0.5.13's module: the same
                                                      dataclass ``ServerArgs``)

Launches whose allocations this package does not price keep stock sizing with one log line
(:mod:`.launch_policy`): multi-layer EAGLE, frozen-KV MTP, DFLASH, NGRAM, DeepSeek-V4, ...

This file only declares the releases and the phase modules; ``hooks.adapter_patches`` reads
their tables.
"""

from __future__ import annotations

# One internal API generation (ModelRunner-owned sizing, upstream's phased init).
RELEASES = ("0.5.14", "0.5.15", "0.5.15.post1")

PHASE_MODULES = ("scheduler", "runtime_budget", "eagle", "launch_checks")
