"""Target tensors no checkpoint stores, priced by SGLang's own modules: the rotary cos/sin cache.

The checkpoint headers (:mod:`sglang_specinit.planner.weights`) miss what the target model
builds itself. The one such tensor resident when the pool is sized is the rotary embedding's
``cos_sin_cache`` buffer: measured on a stock 0.5.13.post1 cpu launch of the tiny Llama test pair
(every live tensor listed when ``init_memory_pool`` starts), the target held its checkpoint's
tensors plus that one buffer and nothing else (no sampler, logits or token-oracle tensor).

How SGLang builds it (read in 0.5.13.post1, 0.5.14 and 0.5.23; same steps in all three):

* each attention layer asks the rope factory (``layers/rotary_embedding/factory.py``
  ``get_rope`` / ``get_rope_wrapper``) for its rope with arguments its model file reads from
  the config (:data:`ROPE_READINGS`); the factory caches modules by their arguments, so layers
  with equal arguments share one module and one buffer;
* ``RotaryEmbedding.__init__`` (``layers/rotary_embedding/base.py``: 0.5.13.post1 line 76,
  0.5.14 line 97, 0.5.23 line 119) keeps the cache in fp32 on CUDA and casts it to the rope's
  dtype elsewhere (0.5.23 also keeps fp32 on HIP / XPU or with ``SGLANG_ROPE_CACHE_FP32``); the
  dtype is ``torch.get_default_dtype()``, which the loader sets to the model's dtype while it
  builds the model (``model_loader/loader.py`` ``set_default_torch_dtype(model_config.dtype)``);
* after loading, ``ModelRunner.load_model`` grows every cache to the context length plus the
  speculative steps' positions (``utils/common.py`` ``reserve_rope_cache_for_long_sequences``:
  0.5.13.post1 ``model_runner.py`` line 1476, 0.5.14 line 1535, 0.5.23 line 1399), before the
  pool is sized.

The planner runs those same SGLang functions on the ``meta`` device (no memory), with the
platform flags ``RotaryEmbedding.__init__`` reads answering for the planned device
(:func:`rope_built_for`), and counts the built buffers. Model families whose rope construction
was not read get one note saying the buffer is not priced.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sglang_specinit.report import human_bytes


@dataclass(frozen=True)
class RopeCall:
    """One ``get_rope`` (or ``get_rope_wrapper``) call as a model file makes it."""

    kwargs: dict[str, Any]
    # get_rope_wrapper (DeepSeek): takes the server's device besides get_rope's arguments.
    wrapper: bool = False


@dataclass(frozen=True)
class TargetBuffers:
    """Bytes the target holds on one rank beyond its checkpoint's tensors, and what they are."""

    bytes: int
    # "rotary cos/sin cache 2432 x 16 bfloat16" per distinct buffer; empty when nothing priced.
    items: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def line(self) -> str:
        """The plan's text line."""
        what = "; ".join(self.items) if self.items else "none priced"
        return f"target buffers not in the checkpoint: {human_bytes(self.bytes)} ({what})"

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "items": list(self.items)}


def _head_dim(config: Any) -> int:
    """The head width every family's model file reads (``head_dim``, else hidden / heads)."""
    return int(getattr(config, "head_dim", config.hidden_size // config.num_attention_heads))


def _dense_rope(config: Any, rotary_dim: int, theta: Any, scaling: Any, **extra: Any) -> RopeCall:
    """The ``get_rope`` call a decoder-only model file makes with the config's head width and
    ``max_position_embeddings`` (8192 where absent, as those files default)."""
    return RopeCall(
        {
            "head_size": _head_dim(config),
            "rotary_dim": rotary_dim,
            "max_position": getattr(config, "max_position_embeddings", 8192),
            "base": theta,
            "rope_scaling": scaling,
            **extra,
        }
    )


def _llama(config: Any) -> list[RopeCall]:
    """``LlamaDecoderLayer.__init__`` / ``LlamaAttention.__init__`` (``models/llama.py``:
    0.5.13.post1 lines 266-276 and 162-196, 0.5.14 266 and 189, 0.5.23 322-336 and 225)."""
    rope_parameters = getattr(config, "rope_parameters", None)
    if rope_parameters is not None:
        theta, scaling = rope_parameters.get("rope_theta", 10000), dict(rope_parameters)
    else:
        theta = getattr(config, "rope_theta", 10000)
        scaling = getattr(config, "rope_scaling", None)
        scaling = dict(scaling) if scaling is not None else None
    if scaling is not None and getattr(config, "original_max_position_embeddings", None):
        scaling["original_max_position_embeddings"] = config.original_max_position_embeddings
    head_dim = _head_dim(config)
    rotary_dim = int(getattr(config, "partial_rotary_factor", 1) * head_dim)
    return [
        _dense_rope(
            config,
            rotary_dim,
            theta,
            scaling,
            is_neox_style=getattr(config, "rope_is_neox_style", True),
        )
    ]


def _qwen3_moe(config: Any) -> list[RopeCall]:
    """``Qwen3MoeDecoderLayer.__init__`` / ``Qwen3MoeAttention.__init__``
    (``models/qwen3_moe.py``: 0.5.13.post1 lines 734 and 513, 0.5.14 729 and 508, 0.5.23 811
    and 546), through SGLang's own ``get_rope_config``."""
    from sglang.srt.utils.hf_transformers_utils import get_rope_config

    theta, scaling = get_rope_config(config)
    head_dim = _head_dim(config)
    return [
        _dense_rope(
            config,
            head_dim,
            theta,
            dict(scaling) if scaling is not None else None,
            dual_chunk_attention_config=getattr(config, "dual_chunk_attention_config", None),
        )
    ]


def _gpt_oss(config: Any) -> list[RopeCall]:
    """``GptOssDecoderLayer.__init__`` / ``GptOssAttention.__init__`` (``models/gpt_oss.py``:
    0.5.13.post1 lines 504 and 417, 0.5.14 498 and 411, 0.5.23 531 and 444): sliding and full
    layers ask for the same rope."""
    head_dim = _head_dim(config)
    return [
        _dense_rope(
            config,
            head_dim,
            config.rope_parameters["rope_theta"],
            dict(config.rope_parameters),
        )
    ]


def _deepseek(config: Any) -> list[RopeCall]:
    """``DeepseekV2DecoderLayer.__init__`` / ``DeepseekV2AttentionMLA.__init__``
    (``models/deepseek_v2.py``: 0.5.13.post1 lines 1946-1954, 1496 and 1623; 0.5.14 1966 and
    1635; 0.5.23 2605, 2066 and 2167): a scaled rope becomes ``deepseek_yarn`` on the
    ``qk_rope_head_dim`` dims."""
    if hasattr(config, "rope_parameters"):
        theta = config.rope_parameters["rope_theta"]
        rope_type = config.rope_parameters.get("rope_type")
        scaling = dict(config.rope_parameters) if rope_type != "default" else None
    else:
        theta = config.rope_theta
        scaling = dict(config.rope_scaling) if config.rope_scaling else None
    if scaling:
        scaling["rope_type"] = "deepseek_yarn"
    dims = int(config.qk_rope_head_dim)
    if dims <= 0:
        return []
    return [
        RopeCall(
            {
                "head_size": dims,
                "rotary_dim": dims,
                "max_position": config.max_position_embeddings,
                "base": theta,
                "rope_scaling": scaling,
                "is_neox_style": not getattr(config, "rope_interleave", True),
            },
            wrapper=True,
        )
    ]


# Target architecture -> how its model file asks the factory for its rope.
ROPE_READINGS: dict[str, Callable[[Any], list[RopeCall]]] = {
    "LlamaForCausalLM": _llama,
    "Qwen3MoeForCausalLM": _qwen3_moe,
    "GptOssForCausalLM": _gpt_oss,
    "DeepseekV2ForCausalLM": _deepseek,
    "DeepseekV3ForCausalLM": _deepseek,
}


# 0.5.23's switch keeping the cache in fp32 on any device (``environ.py``; read at build).
ROPE_FP32_SWITCH = "SGLANG_ROPE_CACHE_FP32"


@contextlib.contextmanager
def rope_built_for(device: str, server_args: Any) -> Iterator[None]:
    """SGLang's rope factory building on ``meta`` for the planned ``device``, and only here.

    * ``RotaryEmbedding.__init__`` reads platform flags bound in ``base.py`` at import to keep
      the cache in fp32 (``_is_cuda``; 0.5.23 also ``_is_hip``, ``_is_xpu`` and the
      ``SGLANG_ROPE_CACHE_FP32`` switch): each answers for ``device`` (no planned device is
      HIP: the presets are NVIDIA's), not this host, and the switch is off;
    * its fallback-kernel branch imports a kernel module (``vllm._custom_ops`` on a host that is
      neither CUDA nor a CPU engine); the planner runs no kernel, so ``_is_cpu``, which decides
      nothing else in ``__init__``, answers True;
    * ``DeepseekScalingRotaryEmbedding`` puts its tensors on ``get_device()`` (bound in
      ``rope_variant.py``) unless given a device, which asks this host for an accelerator: it
      answers ``meta``, where the planner builds (the dtype is decided above, not by it);
    * the factory's module cache (``factory._ROPE_DICT``) is a fresh dict, so no meta module
      reaches a model built later in this process;
    * 0.5.13.x / 0.5.14 read the global server args (``rl_on_policy_target``) while building:
      where none are set, the launch's answer for the duration.

    Everything is restored on exit.
    """
    import torch
    from sglang.srt import server_args as server_args_module
    from sglang.srt.layers.rotary_embedding import base, factory, rope_variant

    planned = {"_is_cuda": device == "cuda", "_is_hip": False, "_is_xpu": device == "xpu"}
    planned["_is_cpu"] = True
    saved_flags = {name: getattr(base, name) for name in planned if hasattr(base, name)}
    saved_switch = os.environ.pop(ROPE_FP32_SWITCH, None)
    saved_get_device = rope_variant.get_device
    rope_variant.get_device = lambda *args, **kwargs: "meta"
    saved_cache = factory._ROPE_DICT
    set_global = getattr(server_args_module, "_global_server_args", False) is None
    for name in saved_flags:
        setattr(base, name, planned[name])
    factory._ROPE_DICT = {}
    if set_global:
        server_args_module._global_server_args = server_args
    try:
        with torch.device("meta"):
            yield
    finally:
        for name, value in saved_flags.items():
            setattr(base, name, value)
        if saved_switch is not None:
            os.environ[ROPE_FP32_SWITCH] = saved_switch
        rope_variant.get_device = saved_get_device
        factory._ROPE_DICT = saved_cache
        if set_global:
            server_args_module._global_server_args = None


def _reserve(modules: Any, server_args: Any, model_config: Any) -> None:
    """SGLang's ``reserve_rope_cache_for_long_sequences`` on the built modules: 0.5.13.x /
    0.5.14 take the server args, 0.5.23 reads the published launch instead."""
    from sglang.srt.utils.common import reserve_rope_cache_for_long_sequences as reserve

    if "server_args" in inspect.signature(reserve).parameters:
        reserve(modules, server_args, model_config)
    else:
        reserve(modules, model_config)


def _describe(tensor: Any) -> str:
    shape = " x ".join(str(n) for n in tensor.shape)
    return f"rotary cos/sin cache {shape} {str(tensor.dtype).removeprefix('torch.')}"


def target_buffers(
    server_args: Any, model_config: Any, architecture: str | None = None
) -> TargetBuffers:
    """The target's rotary cos/sin cache bytes on one rank (every rank holds it whole), built
    by the installed release for ``server_args.device`` (``cuda`` unless ``--device``).

    ``architecture`` is the target's as its ``config.json`` names it (default: the config
    object's). Pass it when the object may be shared: a draft ``ModelConfig`` built from the
    same checkpoint renames the cached config's architecture in place (``ModelConfig.
    _config_draft_model``: ``DeepseekV3ForCausalLM`` -> ``...NextN``), which the target's
    model class was chosen before.
    """
    import torch

    config = model_config.hf_config
    if architecture is None:
        architecture = (getattr(config, "architectures", None) or ["?"])[0]
    reading = ROPE_READINGS.get(architecture)
    if reading is None:
        return TargetBuffers(
            0,
            notes=(
                f"{architecture}: the rotary cos/sin cache (a buffer no checkpoint stores) is "
                "not priced; the planner reads the rope construction of "
                f"{', '.join(sorted(ROPE_READINGS))} only. Pass --resident-bytes measured on a "
                "server to include it",
            ),
        )
    from sglang.srt.layers.rotary_embedding import get_rope, get_rope_wrapper

    device = str(server_args.device or "cuda")
    try:
        with rope_built_for(device, server_args):
            built = []
            for call in reading(config):
                kwargs = dict(call.kwargs, dtype=model_config.dtype)
                if call.wrapper:
                    built.append(get_rope_wrapper(**kwargs, device=device))
                else:
                    built.append(get_rope(**kwargs))
            modules = torch.nn.ModuleList(built)
            _reserve(modules, server_args, model_config)
    except (AssertionError, AttributeError, KeyError, TypeError, ValueError) as e:
        # A rope configuration the installed factory refuses would stop the server's model
        # build too; the plan says so instead of failing on a figure of a few MiB.
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return TargetBuffers(
            0,
            notes=(
                f"{architecture}: SGLang's rope factory could not build the rotary cos/sin "
                f"cache for this config ({reason}); the buffer is not priced",
            ),
        )
    # Layers with equal arguments share one module (the factory's cache): count each once.
    tensors = {id(t): t for t in (*modules.buffers(), *modules.parameters())}
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    return TargetBuffers(total, tuple(_describe(t) for t in tensors.values()))
