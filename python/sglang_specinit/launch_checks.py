"""Refuse a bad speculative launch in the launcher, before any rank or pool exists. Plain values
in, no torch or sglang; what stock starts is never refused."""

from __future__ import annotations

import json
import os
import struct
from typing import Any

from sglang_specinit.budget import MIN_SERVABLE_TOKENS, page_ceil, page_floor

# Drafts fed the target's hidden states (both spellings of the MTP alias).
TARGET_FED_DRAFTS = frozenset({"EAGLE", "EAGLE3", "NEXTN"})
SAFETENSORS_LOAD_FORMATS = frozenset({"auto", "safetensors"})
SAFETENSORS_INDEX = "model.safetensors.index.json"


class LaunchCheckError(ValueError):
    """The message names the flag or file to change."""


def check_speculative_launch(
    *,
    algorithm: str | None,
    mem_fraction_static: float | None,
    max_total_tokens: int | None,
    page_size: int | None,
    model_path: str | None,
    draft_path: str | None,
    draft_load_format: str | None = "auto",
) -> None:
    """Every check, in the order a user would fix them; only a speculative launch."""
    if algorithm is None:
        return
    check_mem_fraction_static(mem_fraction_static)
    check_max_total_tokens(max_total_tokens, page_size or 1)
    if not draft_path or not os.path.isdir(draft_path):
        return
    load_format = str(getattr(draft_load_format, "value", draft_load_format) or "auto").lower()
    if load_format in SAFETENSORS_LOAD_FORMATS:
        check_draft_shards(draft_path)
    if str(algorithm).upper() in TARGET_FED_DRAFTS and model_path and os.path.isdir(model_path):
        check_draft_fits_target(model_path, draft_path)


def check_resolved_launch(args: Any) -> None:
    """:func:`check_speculative_launch` on resolved ``ServerArgs``; the draft's own load format,
    when given, replaces ``--load-format`` for the draft worker."""
    check_speculative_launch(
        algorithm=args.speculative_algorithm,
        mem_fraction_static=args.mem_fraction_static,
        max_total_tokens=args.max_total_tokens,
        page_size=args.page_size,
        model_path=args.model_path,
        draft_path=getattr(args, "speculative_draft_model_path", None),
        draft_load_format=getattr(args, "speculative_draft_load_format", None)
        or getattr(args, "load_format", "auto"),
    )


def check_mem_fraction_static(fraction: float | None) -> None:
    if fraction is not None and not 0.0 < fraction < 1.0:
        raise LaunchCheckError(
            f"--mem-fraction-static {fraction} is outside (0, 1): it is the share of free device "
            "memory given to weights + KV pools, and the rest is needed for activations and "
            "graphs. Pass a value such as 0.85, or leave the flag out for SGLang's automatic "
            "choice."
        )


def check_max_total_tokens(max_total_tokens: int | None, page_size: int) -> None:
    if max_total_tokens is None:
        return
    minimum = page_ceil(MIN_SERVABLE_TOKENS, page_size)
    if page_floor(max_total_tokens, page_size) < minimum:
        raise LaunchCheckError(
            f"--max-total-tokens {max_total_tokens} leaves no KV pool with --page-size "
            f"{page_size}: the pool is whole pages and a request needs {MIN_SERVABLE_TOKENS} "
            f"token slots. Pass --max-total-tokens {minimum} or more (or leave it out)."
        )


def safetensors_problem(path: str) -> str | None:
    size = os.path.getsize(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                return f"it is {size} bytes, shorter than a safetensors header"
            (header_len,) = struct.unpack("<Q", raw)
            if header_len > size - 8:
                return f"its header claims {header_len} bytes but the file has {size}"
            header = json.loads(f.read(header_len))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"its header is not readable ({exc})"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    try:
        data_end = max(
            (info["data_offsets"][1] for name, info in header.items() if name != "__metadata__"),
            default=0,
        )
    except (KeyError, TypeError, IndexError):
        return "its header has tensors without data offsets"
    needed = 8 + header_len + data_end
    if size < needed:
        return f"it is truncated: {size} bytes on disk, the header describes {needed}"
    return None


def loaded_shards(checkpoint_dir: str) -> list[str]:
    """The ``.safetensors`` files SGLang's loader reads: those the index names, else all but a
    Mistral ``consolidated.safetensors`` beside ``model.safetensors``."""
    names = sorted(n for n in os.listdir(checkpoint_dir) if n.endswith(".safetensors"))
    index = os.path.join(checkpoint_dir, SAFETENSORS_INDEX)
    if os.path.isfile(index):
        try:
            with open(index) as f:
                named = set(json.load(f)["weight_map"].values())
        except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            return []
        return [n for n in names if n in named]
    if names == ["consolidated.safetensors", "model.safetensors"]:
        return ["model.safetensors"]
    return names


def check_draft_shards(draft_path: str) -> None:
    for name in loaded_shards(draft_path):
        path = os.path.join(draft_path, name)
        problem = safetensors_problem(path)
        if problem is not None:
            raise LaunchCheckError(
                f"draft checkpoint file {path} cannot be loaded: {problem}. Re-download or "
                "re-export it, or point --speculative-draft-model-path at an intact checkpoint."
            )


def _text_config(model_dir: str) -> dict[str, Any] | None:
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            config = json.load(f)
    except (OSError, json.JSONDecodeError):
        return None  # SGLang's own config reading reports this one
    if not isinstance(config, dict):
        return None
    return config.get("text_config") or config


def check_draft_fits_target(model_path: str, draft_path: str) -> None:
    """The draft's input width (``target_hidden_size``, else ``hidden_size``) must be the
    target's ``hidden_size``; the vocabulary is not checked, as stock starts such drafts."""
    target, draft = _text_config(model_path), _text_config(draft_path)
    if target is None or draft is None:
        return
    target_hidden = target.get("hidden_size")
    key = "target_hidden_size" if draft.get("target_hidden_size") is not None else "hidden_size"
    value = draft.get(key)
    if value is not None and target_hidden is not None and value != target_hidden:
        raise LaunchCheckError(
            f"draft {key} {value} ({os.path.join(draft_path, 'config.json')}) does not fit the "
            f"target's hidden_size {target_hidden} ({os.path.join(model_path, 'config.json')}): "
            "the draft reads the target's hidden states. Pass a draft trained for this target "
            "with --speculative-draft-model-path."
        )
