"""Refuse a bad speculative launch in the launcher, before any rank or pool exists.

Release-independent: every check here takes plain values (flags as SGLang resolved them) and
paths, and reads at most ``config.json`` files and the headers of safetensors shards (a few KiB).
No torch, no sglang import. Each release adapter only reads its own ``ServerArgs`` in the
launcher and calls :func:`check_speculative_launch` (``dataclass_args.launch_checks``,
``sglang_0_5_23.launch_checks``), so both releases refuse the same launches with the same
one-line messages, each naming the flag or file to change.

Why in the launcher: otherwise every rank finds these problems only after the target's weights
loaded (a fraction outside (0, 1) or a pool below one page in the budget, a truncated shard in
the safetensors loader) or never (a draft whose input width does not fit the target loads,
binds, and fails on its first forward pass). At TP > 1 a rank-local failure also leaves the
other ranks waiting in a collective until SGLang's launcher tears the launch down.

What is never refused, because stock SGLang starts it: a draft vocabulary of its own, a draft
given as a hub id (nothing local to read), a shard a load format other than safetensors never
reads, a shard the checkpoint's ``model.safetensors.index.json`` does not name.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

from sglang_specinit.budget import MIN_SERVABLE_TOKENS, page_ceil, page_floor

# Algorithms whose draft reads the target's hidden states, so its input width must be the
# target's hidden size (both spellings of the MTP alias, whichever the release resolved).
TARGET_FED_DRAFTS = frozenset({"EAGLE", "EAGLE3", "NEXTN"})
# Draft load formats that read the checkpoint's .safetensors files (SGLang's "auto" prefers
# them when present); any other format (pt, dummy, gguf, remote ...) never opens them.
SAFETENSORS_LOAD_FORMATS = frozenset({"auto", "safetensors"})
SAFETENSORS_INDEX = "model.safetensors.index.json"


class LaunchCheckError(ValueError):
    """A flag or a checkpoint cannot work; the message says which one and what to change."""


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
    """Every check, in the order a user would fix them; the first failure is raised.

    Only a speculative launch (``algorithm`` set) is checked: the plugin changes nothing else.
    ``draft_path`` is read only when it is a local directory; ``draft_load_format`` is the
    format the draft really loads with (the draft's own flag, else ``--load-format``).
    """
    if algorithm is None:
        return
    check_mem_fraction_static(mem_fraction_static)
    check_max_total_tokens(max_total_tokens, page_size or 1)
    if not draft_path or not os.path.isdir(draft_path):
        return
    # A release may hand the format over as an enum member; its value is the flag's spelling.
    load_format = str(getattr(draft_load_format, "value", draft_load_format) or "auto").lower()
    if load_format in SAFETENSORS_LOAD_FORMATS:
        check_draft_shards(draft_path)
    if str(algorithm).upper() in TARGET_FED_DRAFTS and model_path and os.path.isdir(model_path):
        check_draft_fits_target(model_path, draft_path)


def check_mem_fraction_static(fraction: float | None) -> None:
    """The fraction must leave room for weights + pools and for what runs outside them."""
    if fraction is not None and not 0.0 < fraction < 1.0:
        raise LaunchCheckError(
            f"--mem-fraction-static {fraction} is outside (0, 1): it is the share of free device "
            "memory given to weights + KV pools, and the rest is needed for activations and "
            "graphs. Pass a value such as 0.85, or leave the flag out for SGLang's automatic "
            "choice."
        )


def check_max_total_tokens(max_total_tokens: int | None, page_size: int) -> None:
    """A cap below one servable page leaves the pool empty (it is floored to whole pages)."""
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
    """Why a ``.safetensors`` file cannot be loaded, from its header and size alone."""
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
    """The ``.safetensors`` files of a checkpoint SGLang's loader reads, sorted by name.

    With a ``model.safetensors.index.json``, only the files its ``weight_map`` names (a stray
    consolidated file beside the shards is never opened); without one, every file, except a
    Mistral-style ``consolidated.safetensors`` that sits beside ``model.safetensors``. An
    unreadable index is left to SGLang's loader, which reports it itself.
    """
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
    """Every safetensors shard the loader reads from a local draft checkpoint is complete."""
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
    """An EAGLE/EAGLE3/MTP draft reads the target's hidden states: its input width must be the
    target's ``hidden_size``.

    That input width is ``target_hidden_size`` where the draft declares one (an EAGLE3 draft may
    be narrower or wider than its target inside) and ``hidden_size`` otherwise, as SGLang's
    draft models read it. The vocabulary is not checked: SGLang replaces the draft's embedding
    with the target's, and an EAGLE3 draft's own head has a vocabulary of its own, so stock
    starts such a draft and so must we.
    """
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
