"""Refuse a bad speculative launch before any process or pool exists (sglang 0.5.13.x).

BEFORE ``ServerArgs.check_server_args``: SGLang's own argument validation, which
``Engine._launch_subprocesses`` runs in the launcher (``launch_server`` or ``sglang.Engine``)
once ``__post_init__`` has resolved the fraction, page size, parallel layout and algorithm
aliases, and before any scheduler is spawned. Each check names the flag or file to change;
everything it reads is a flag or a few KiB of ``config.json`` / safetensors headers.

Why here: stock 0.5.13.post1 and the phased init would otherwise find these problems on every
rank, after the target weights loaded (a fraction outside (0, 1) and a pool below one page in
the budget model, a truncated draft shard in the safetensors loader), or never (a draft whose
input width does not fit the target's hidden size loads and binds, and fails on the first
forward pass). At TP > 1 a rank-local failure leaves the other ranks waiting in a collective
until SGLang's launcher tears the launch down; a launcher-side refusal starts no rank at all.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

from sglang_specinit.budget import MIN_SERVABLE_TOKENS, page_ceil, page_floor
from sglang_specinit.hooks import Hook

# Algorithms whose draft reads the target's embedding and hidden states, so its width and
# vocabulary must be the target's (NEXTN is resolved to EAGLE by then; both spellings checked).
_TARGET_FED_DRAFTS = frozenset({"EAGLE", "EAGLE3", "NEXTN"})


class LaunchCheckError(ValueError):
    """A flag or a checkpoint cannot work; the message says which one and what to change."""


def check_launch(server_args: Any) -> None:
    """BEFORE ``ServerArgs.check_server_args``: every check below, first failure raised."""
    if getattr(server_args, "speculative_algorithm", None) is None:
        return
    check_mem_fraction_static(server_args.mem_fraction_static)
    check_max_total_tokens(server_args.max_total_tokens, server_args.page_size or 1)
    draft_path = getattr(server_args, "speculative_draft_model_path", None)
    if draft_path and os.path.isdir(draft_path):
        check_draft_shards(draft_path)
        algorithm = str(server_args.speculative_algorithm).upper()
        if algorithm in _TARGET_FED_DRAFTS and os.path.isdir(server_args.model_path):
            check_draft_fits_target(server_args.model_path, draft_path)


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


def check_draft_shards(draft_path: str) -> None:
    """Every safetensors shard of a local draft checkpoint must be complete."""
    for name in sorted(os.listdir(draft_path)):
        if not name.endswith(".safetensors"):
            continue
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


HOOKS = (
    Hook(
        "sglang.srt.server_args",
        "ServerArgs.check_server_args",
        check_launch,
        kind="BEFORE",
        params=(),
    ),
)
NEW_METHODS = ()
REQUIRES = ()
