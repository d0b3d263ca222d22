"""ModelRunner in phases (0.5.13 / 0.5.13.post1).

0.5.13's ``initialize`` loads weights, sizes the KV pool from free memory measured right then and
builds backends and graphs. A phased init stops it at ``init_memory_pool``; the rest runs later in
SGLang's order, from the added ``alloc_memory_pool`` (pool, canary, capturers) and
``init_backends`` (attention backend, warmup, graphs, forward hooks).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

from sglang_specinit.patch_table import PatchTable
from sglang_specinit.pool_measure import attributes_restored
from sglang_specinit.sglang_0_5_13.state import deferring_pools, run_until

logger = logging.getLogger(__name__)

# Stand-ins for TpModelWorker's pool-size asserts, deleted once its constructor returns so that an
# early read fails loudly.
PROVISIONAL_SIZE = 2**31 - 1
PROVISIONAL_ATTRS = ("max_total_num_tokens", "max_running_requests", "full_max_total_num_tokens")

# Devices whose post-pool init this module reproduces.
PHASED_DEVICES = ("cuda", "musa", "cpu")

MODULE = "sglang.srt.model_executor.model_runner"
MIXIN_MODULE = "sglang.srt.model_executor.model_runner_kv_cache_mixin"
POOL_CONFIGURATOR_MODULE = "sglang.srt.model_executor.pool_configurator"
patch = PatchTable(MODULE)


@patch.around("ModelRunner.initialize", params=("pre_model_load_memory",))
@patch.calls("ModelRunner.init_memory_pool")  # the cut; alloc_memory_pool calls it later
def initialize(original: Any, self: Any, pre_model_load_memory: float) -> None:
    if not deferring_pools():
        return original(self, pre_model_load_memory)
    self.pre_model_load_memory = pre_model_load_memory
    # The EAGLE draft worker disables graphs while its runner is built; that must hold later.
    self._specinit_capture_device_graphs = not self.server_args.disable_cuda_graph
    reached = run_until(self, "init_memory_pool", lambda: original(self, pre_model_load_memory))
    if not reached:
        raise RuntimeError(
            "sglang-specinit: ModelRunner.initialize finished without reaching init_memory_pool; "
            "this sglang build is not the one the plugin was written for. "
            "Set SGLANG_SPECINIT_DISABLE=1 and report the sglang version."
        )
    self._specinit_pools_pending = True
    for name in PROVISIONAL_ATTRS:
        setattr(self, name, PROVISIONAL_SIZE)


# 0.5.14's name for the draft's KV layer count read before loading.
EARLY_DRAFT_LAYERS_ATTR = "eagle_draft_num_layers"
_MODEL_CONFIG_LOGGER = "sglang.srt.configs.model_config"


def early_draft_num_layers(server_args: Any) -> int | None:
    """The KV layers each draft runner will allocate, read off the draft's config before any
    weights load (informational); built in ``defer_pools()``: SGLang rewrites the draft's copy."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_specinit.model_facts import runner_layer_count
    from sglang_specinit.sglang_0_5_13.state import defer_pools, logger_disabled

    algorithm = SpeculativeAlgorithm.from_string(server_args.speculative_algorithm)
    if not (algorithm.is_eagle() or algorithm.is_standalone()):
        return None
    try:  # phase 2 builds and logs this config again
        with logger_disabled(_MODEL_CONFIG_LOGGER), defer_pools():
            draft_config = ModelConfig.from_server_args(
                server_args,
                model_path=server_args.speculative_draft_model_path,
                model_revision=server_args.speculative_draft_model_revision,
                is_draft_model=True,
            )
            return runner_layer_count(draft_config, is_draft=True)
    except Exception as exc:  # the real draft build in phase 2 raises SGLang's own error
        logger.info("[specinit] draft layer count not read before loading: %s", exc)
        return None


def warn_if_draft_layers_differ(early: int | None, draft_runners: Sequence[Any]) -> bool:
    """One WARNING if the runners allocate another layer count than the config gave: the budget
    holds (it priced the runners), but a plan read from the config would be wrong."""
    if early is None or not draft_runners:
        return False
    allocated = [int(runner.num_effective_layers) for runner in draft_runners]
    if all(layers == early for layers in allocated):
        return False
    logger.warning(
        "[specinit] the draft runners allocate %s KV layers, but the draft config read before "
        "loading gave %s=%d; the pools were sized from the runners, a plan from the config "
        "prices %d",
        "/".join(map(str, allocated)),
        EARLY_DRAFT_LAYERS_ATTR,
        early,
        early,
    )
    return True


def clear_provisional_sizes(model_runner: Any) -> None:
    if getattr(model_runner, "_specinit_pools_pending", False):
        for name in PROVISIONAL_ATTRS:
            model_runner.__dict__.pop(name, None)


@patch.around(
    "ModelRunnerKVCacheMixin._resolve_memory_pool_config",
    params=("pre_model_load_memory",),
    module=MIXIN_MODULE,
)
# What the sizing it runs calls (runtime_budget.SpeculativeSizing.resolve, pool_probe).
@patch.calls("create_memory_pool_configurator", module=POOL_CONFIGURATOR_MODULE)
@patch.calls(
    "ModelRunner._profile_available_bytes",
    "ModelRunner._apply_token_constraints",
    "ModelRunner._resolve_max_num_reqs",
    "ModelRunner._init_pools",
)
def resolve_memory_pool_config(original: Any, self: Any, pre_model_load_memory: float) -> Any:
    sizing = getattr(self, "_specinit_sizing", None)
    if sizing is None:
        return original(self, pre_model_load_memory)
    return sizing.resolve(self, pre_model_load_memory)


@patch.adds("ModelRunner")
@patch.calls(
    "ModelRunner.maybe_init_ngram_embedding",
    "ModelRunner.init_routed_experts_capturer",
    "ModelRunner.init_indexer_capturer",
)
def alloc_memory_pool(self: Any, memory_pool_config: Any = None) -> None:
    """Phase 3 for one runner; a draft runner takes the target's resolved config."""
    if memory_pool_config is not None:
        self.memory_pool_config = memory_pool_config
    clear_provisional_sizes(self)
    self.init_memory_pool(self.pre_model_load_memory)
    # Canary patches the pool's methods, so it must follow the pool and precede any warmup.
    runner_module = sys.modules[type(self).__module__]
    self.canary_manager = runner_module.install_canary(
        server_args=self.server_args,
        model_runner=self,
        token_oracle_manager=self._token_oracle_manager,
    )
    self.maybe_init_ngram_embedding()
    self.init_routed_experts_capturer()
    self.init_indexer_capturer()
    self._specinit_pools_pending = False


@patch.adds("ModelRunner")
@patch.calls(
    "ModelRunner.init_aux_hidden_state_capture",
    "ModelRunner.init_cublas",
    "ModelRunner.init_attention_backend",
    "ModelRunner.kernel_warmup",
    "ModelRunner._pre_initialize_flashinfer_allreduce_workspace",
    "ModelRunner.init_device_graphs",
    "ModelRunner.init_piecewise_cuda_graphs",
    "ModelRunner.prealloc_symmetric_memory_pool",
)
def init_backends(self: Any) -> None:
    self.init_aux_hidden_state_capture()
    args = self.server_args  # graphs disabled as they were while the runner was constructed
    capture = getattr(self, "_specinit_capture_device_graphs", not args.disable_cuda_graph)
    with attributes_restored(args, ("disable_cuda_graph",)):
        args.disable_cuda_graph = not capture
        if self.device in ("cuda", "musa"):
            self.init_cublas()
            self.init_attention_backend()
            self.kernel_warmup()
            self._pre_initialize_flashinfer_allreduce_workspace()
            self.init_device_graphs()
        elif self.device == "cpu":
            self.init_attention_backend()
            self.init_device_graphs()
        else:
            raise RuntimeError(
                f"sglang-specinit cannot build backends on device {self.device!r}; "
                "the phased init should have been skipped (launch_policy.phasing_blocker)"
            )
    if self.server_args.forward_hooks:
        runner_module = sys.modules[type(self).__module__]
        runner_module.register_forward_hooks(self.model, self.server_args.forward_hooks)
    # Draft runners return early here unless their worker forces the capture later.
    self.init_piecewise_cuda_graphs()
    self.prealloc_symmetric_memory_pool()
    if self.canary_manager is not None and not self.is_draft_worker:
        self.canary_manager.mark_init_finished()


# Functions of the runner's module the phases call.
patch.requires("install_canary", "register_forward_hooks")

HOOKS, NEW_METHODS, REQUIRES = patch.tables()
