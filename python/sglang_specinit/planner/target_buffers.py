"""The target's rotary cos/sin cache (a buffer no checkpoint stores), built by SGLang's rope
factory on ``meta``; other model families get a note that it is not priced."""

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
    # get_rope_wrapper (DeepSeek) also takes the server's device.
    wrapper: bool = False


@dataclass(frozen=True)
class TargetBuffers:
    """Bytes the target holds on one rank beyond its checkpoint's tensors, and what they are."""

    bytes: int
    items: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def line(self) -> str:
        what = "; ".join(self.items) if self.items else "none priced"
        return f"target buffers not in the checkpoint: {human_bytes(self.bytes)} ({what})"

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "items": list(self.items)}


def _head_dim(config: Any) -> int:
    return int(getattr(config, "head_dim", config.hidden_size // config.num_attention_heads))


def _dense_rope(config: Any, rotary_dim: int, theta: Any, scaling: Any, **extra: Any) -> RopeCall:
    """The ``get_rope`` call of a decoder-only model file (max position 8192 where absent)."""
    max_position = getattr(config, "max_position_embeddings", 8192)
    call = {"head_size": _head_dim(config), "rotary_dim": rotary_dim, "max_position": max_position}
    return RopeCall({**call, "base": theta, "rope_scaling": scaling, **extra})


def _llama(config: Any) -> list[RopeCall]:
    """As ``models/llama.py``'s attention asks."""
    rope_parameters = getattr(config, "rope_parameters", None)
    if rope_parameters is not None:
        theta, scaling = rope_parameters.get("rope_theta", 10000), dict(rope_parameters)
    else:
        theta = getattr(config, "rope_theta", 10000)
        scaling = getattr(config, "rope_scaling", None)
        scaling = dict(scaling) if scaling is not None else None
    if scaling is not None and getattr(config, "original_max_position_embeddings", None):
        scaling["original_max_position_embeddings"] = config.original_max_position_embeddings
    rotary_dim = int(getattr(config, "partial_rotary_factor", 1) * _head_dim(config))
    neox = getattr(config, "rope_is_neox_style", True)
    return [_dense_rope(config, rotary_dim, theta, scaling, is_neox_style=neox)]


def _qwen3_moe(config: Any) -> list[RopeCall]:
    """As ``models/qwen3_moe.py``'s attention asks, through SGLang's ``get_rope_config``."""
    from sglang.srt.utils.hf_transformers_utils import get_rope_config

    theta, scaling = get_rope_config(config)
    scaling = dict(scaling) if scaling is not None else None
    extra = {"dual_chunk_attention_config": getattr(config, "dual_chunk_attention_config", None)}
    return [_dense_rope(config, _head_dim(config), theta, scaling, **extra)]


def _gpt_oss(config: Any) -> list[RopeCall]:
    """As ``models/gpt_oss.py`` asks: sliding and full layers share one rope."""
    params = config.rope_parameters
    return [_dense_rope(config, _head_dim(config), params["rope_theta"], dict(params))]


def _deepseek(config: Any) -> list[RopeCall]:
    """As ``models/deepseek_v2.py`` asks: a scaled rope is ``deepseek_yarn`` on the
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
    neox = not getattr(config, "rope_interleave", True)
    call = {"head_size": dims, "rotary_dim": dims, "max_position": config.max_position_embeddings}
    kwargs = {**call, "base": theta, "rope_scaling": scaling, "is_neox_style": neox}
    return [RopeCall(kwargs, wrapper=True)]


# Target architecture -> how its model file asks the factory for its rope.
ROPE_READINGS: dict[str, Callable[[Any], list[RopeCall]]] = {
    "LlamaForCausalLM": _llama,
    "Qwen3MoeForCausalLM": _qwen3_moe,
    "GptOssForCausalLM": _gpt_oss,
    "DeepseekV2ForCausalLM": _deepseek,
    "DeepseekV3ForCausalLM": _deepseek,
}


# The switch (newer releases) keeping the cache in fp32 on any device.
ROPE_FP32_SWITCH = "SGLANG_ROPE_CACHE_FP32"


@contextlib.contextmanager
def rope_built_for(device: str, server_args: Any) -> Iterator[None]:
    """SGLang's rope factory building on ``meta`` for the planned ``device`` (``_is_cpu``: no
    fallback kernel imported), with a fresh cache; restored on exit."""
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


def target_buffers(
    server_args: Any, model_config: Any, architecture: str | None = None
) -> TargetBuffers:
    """The target's rotary cos/sin cache bytes on one rank, built for ``server_args.device``;
    ``architecture`` as ``config.json`` names it (a draft ``ModelConfig`` renames it in place)."""
    import torch

    config = model_config.hf_config
    if architecture is None:
        architecture = (getattr(config, "architectures", None) or ["?"])[0]
    reading = ROPE_READINGS.get(architecture)
    if reading is None:
        note = (
            f"{architecture}: the rotary cos/sin cache (a buffer no checkpoint stores) is not "
            f"priced; the planner reads the rope construction of {', '.join(sorted(ROPE_READINGS))}"
            " only. Pass --resident-bytes measured on a server to include it"
        )
        return TargetBuffers(0, notes=(note,))
    from sglang.srt.layers.rotary_embedding import get_rope, get_rope_wrapper
    from sglang.srt.utils.common import reserve_rope_cache_for_long_sequences as reserve

    device = str(server_args.device or "cuda")
    try:
        with rope_built_for(device, server_args):
            built = [
                get_rope_wrapper(**call.kwargs, dtype=model_config.dtype, device=device)
                if call.wrapper
                else get_rope(**call.kwargs, dtype=model_config.dtype)
                for call in reading(config)
            ]
            modules = torch.nn.ModuleList(built)
            # SGLang's cache reserve, with or without the server args.
            if "server_args" in inspect.signature(reserve).parameters:
                reserve(modules, server_args, model_config)
            else:
                reserve(modules, model_config)
    except (AssertionError, AttributeError, KeyError, TypeError, ValueError) as e:
        # The server's model build would fail too; a note beats failing on a few MiB.
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        note = (
            f"{architecture}: SGLang's rope factory could not build the rotary cos/sin cache for "
            f"this config ({reason}); the buffer is not priced"
        )
        return TargetBuffers(0, notes=(note,))
    # The factory caches modules by arguments: count each shared buffer once.
    tensors = {id(t): t for t in (*modules.buffers(), *modules.parameters())}
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    items = tuple(
        f"rotary cos/sin cache {' x '.join(map(str, t.shape))} "
        f"{str(t.dtype).removeprefix('torch.')}"
        for t in tensors.values()
    )
    return TargetBuffers(total, items)
