"""What a served release's *server-args replay* answers the plan, and what the replays share.

The planner runs the pieces of the installed SGLang's start-up that decide the pool size, without a
GPU and without network access (``HF_HUB_OFFLINE=1``). Which pieces, and how they are called, is
release-specific: one :class:`ServerArgsReplay` per adapter package, its ``planner_replay.REPLAY``
(found through :mod:`sglang_specinit.planner.releases`). A replay parses the flags with the
release's own parser, answers with a :class:`ResolvedLaunch` (what that release decided), the KV
dtype of each runner and :class:`PoolPrices` (each pool priced, and stock's pool sized, by the
release's own code); :mod:`sglang_specinit.planner.plan` turns that into the two columns.

The helpers below are used by every replay: SGLang's functions as released (without this
package's runtime hooks), ``ModelConfig`` construction with malformed configs reported as bad
input, the checkpoint's KV quantization, and the models the planner refuses.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sglang_specinit.budget import BudgetError, BudgetInputs, KVSpec, PoolPlan
from sglang_specinit.model_facts import is_linear_attention_hybrid
from sglang_specinit.planner.gpus import DeviceSpec
from sglang_specinit.planner.inputs import PlanError

# SGLang's is_cpu() reads this variable (utils/common.py, 0.5.13.x and 0.5.23).
CPU_ENGINE_ENV = "SGLANG_USE_CPU_ENGINE"


@dataclass(frozen=True)
class ResolvedLaunch:
    """What one release's server-args logic decided for a launch, in the shape the plan reads.

    ``args`` answers attribute reads (``speculative_algorithm``, ``tp_size``, ``page_size``,
    ``kv_cache_dtype``, ``max_running_requests`` ...) with the values after that release's
    speculative hook; ``config_source`` is what its ``ModelConfig.from_server_args`` takes.
    """

    args: Any
    config_source: Any
    target_model_config: Any
    # The automatic --mem-fraction-static as the release computes it (the user's value when
    # given), and the same without a flat speculative reserve (0.5.14+; equal where none exists).
    stock_fraction: float
    new_fraction: float
    attn_tp_size: int
    # Attention-DP width the budget divides --max-running-requests by.
    dp_size: int
    # Server args for specs' MLA width (SGLang's calculate_mla_kv_cache_dim); None: plain width.
    mla_server_args: Any


@dataclass(frozen=True)
class PoolPrices:
    """A launch's KV pools priced by the installed release's own pool code (what its server
    runs), per target token row, and stock's sizing by the same release's code."""

    target_kv: KVSpec
    draft_pools: tuple[KVSpec, ...]
    draft_fixed_bytes: int
    # The release's own stock sizing on the same runners / configurators: inputs -> plan.
    stock_plan: Callable[[BudgetInputs], PoolPlan]
    # Bytes per request row of the draft's per-request buffers, by the release's own rule.
    draft_request_bytes: int = 0
    # Where this package's column is not the shared budget model's (DeepSeek-V4: the release's
    # own V4 solve with the draft's measured term): inputs -> this package's plan.
    ours_plan: Callable[[BudgetInputs], PoolPlan] | None = None


# The two things a stock column says about the draft (0.5.14+ stock sizing).
def duplicates_note(release: str) -> str:
    return f"{release} profiles while the draft's duplicate embed/lm_head are resident"


def short_reserve_note(release: str) -> str:
    return f"{release} reserves less draft KV per token than the draft allocates"


class ServerArgsReplay(Protocol):
    """One served release's launch_server parser and server-args resolution, run offline."""

    release: str
    # The stock column's key in ``plan --json``.
    stock_key: str

    def parse_launch(self, launch: Sequence[str]) -> Any:
        """The release's own ``launch_server`` parser applied to ``launch``; bad flags raise
        :class:`PlanError`."""

    def resolve(self, server_args: Any, device: DeviceSpec) -> ResolvedLaunch:
        """The release's decisions for ``server_args`` on ``device``; its refusals raise
        ``ValueError`` (one line)."""

    def kv_dtype(
        self, launch: ResolvedLaunch, model_config: Any, *, is_draft: bool, target_kv_dtype: Any
    ) -> str:
        """The torch dtype name of a runner's KV pool (target, or draft after the target)."""

    def pool_prices(self, launch: ResolvedLaunch, device: DeviceSpec) -> PoolPrices:
        """Every pool of the launch priced, and stock sized, by the release's own code."""


# --------------------------------------------------------------------------------------------
# Shared by the replays


def released(fn: Any) -> Any:
    """SGLang's function as released: plugin hooks (this package's runtime patch drops the
    speculative reserve from the heuristic) wrap it with ``__wrapped__`` set, and the planner
    must compute the stock column even in a process where the plugin is loaded."""
    return inspect.unwrap(fn)


def build_model_config(build: Any, server_args: Any, **kwargs: Any) -> Any:
    """``ModelConfig.from_server_args``, with a malformed config reported as bad input."""
    path = kwargs.get("model_path") or server_args.model_path
    try:
        return build(server_args, **kwargs)
    except (AttributeError, KeyError, TypeError, OSError) as e:
        raise PlanError(f"SGLang cannot build a ModelConfig from {path}: {e}") from e


@contextlib.contextmanager
def cuda_quantization_names() -> Iterator[None]:
    """Let ``ModelConfig`` accept quantization names only a CUDA build of SGLang registers.

    ``ModelConfig._verify_quantization`` checks the checkpoint's ``quant_method`` against
    ``QUANTIZATION_METHODS``, to which ``layers/quantization/__init__.py`` adds ``mxfp4`` only
    when ``is_cuda()``. The plan is for a CUDA server but may run on a CPU-only host, and only
    the name check runs here (no kernel is built), so the entry is added for the duration.
    """
    from sglang.srt.layers.quantization import QUANTIZATION_METHODS
    from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config

    added = "mxfp4" not in QUANTIZATION_METHODS
    if added:
        QUANTIZATION_METHODS["mxfp4"] = Mxfp4Config
    try:
        yield
    finally:
        if added:
            QUANTIZATION_METHODS.pop("mxfp4", None)


def kv_cache_quant_algo(model_config: Any) -> str | None:
    """The checkpoint's ``kv_cache_quant_algo`` (ModelOpt), read from SGLang's parse of
    ``quantization_config`` / ``hf_quant_config.json``."""
    parsed = model_config._parse_quant_hf_config() or {}
    for section in (parsed, parsed.get("quantization") or {}):
        algo = section.get("kv_cache_quant_algo")
        if isinstance(algo, str):
            return algo.upper()
        scheme = section.get("kv_cache_scheme")
        if isinstance(scheme, dict) and (scheme.get("type"), scheme.get("num_bits")) == (
            "float",
            8,
        ):
            return "FP8"
    return None


def refuse_unpriced_model(target_mc: Any) -> None:
    """Mamba/linear-attention hybrids: their state pool (handle_max_mamba_cache) is not priced
    offline."""
    if is_linear_attention_hybrid(target_mc):
        raise BudgetError(
            f"{target_mc.hf_config.architectures[0]}: mamba/linear-attention state is not "
            "priced by the offline planner"
        )


def installed_release() -> str:
    """The installed release a replay runs (one the plugin serves): every label of a plan made
    in its environment names it (``compat.installed_sglang_version``)."""
    from sglang_specinit.compat import installed_sglang_version

    return str(installed_sglang_version())


def stock_key(release: str) -> str:
    """``plan --json``'s key of ``release``'s stock column: ``stock_0_5_23`` ..."""
    return "stock_" + release.replace(".", "_")


class InstalledReleaseReplay:
    """A replay that runs whichever release of its adapter is installed: every label of its
    plans names that release."""

    @property
    def release(self) -> str:
        return installed_release()

    @property
    def stock_key(self) -> str:
        return stock_key(self.release)
