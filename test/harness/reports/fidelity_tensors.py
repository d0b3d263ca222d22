"""Scheduler-side facts for the fidelity matrix: every model tensor and every KV-pool buffer."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from harness.reports.scheduler_report import tensors_in

TENSOR_REPORT_ENV = "SPECINIT_TEST_TENSOR_REPORT"


# Per-row digests for tensors of at most this many rows (fused projections of the tiny models;
# a vocabulary-sized embedding is compared whole).
ROW_DIGEST_MAX_ROWS = 1024


def _bytes(tensor: Any, *shape: int) -> Any:
    """The tensor's bytes as a uint8 numpy array of ``shape`` (bools as uint8)."""
    import torch

    data = tensor.detach().to("cpu").contiguous().reshape(*shape)
    return (data.to(torch.uint8) if data.dtype == torch.bool else data).view(torch.uint8).numpy()


def _digest(tensor: Any) -> str | None:
    if tensor.device.type == "meta":
        return None
    return hashlib.sha256(_bytes(tensor, -1).tobytes()).hexdigest()


def _storage_key(tensor: Any) -> tuple[int, int] | None:
    try:
        storage = tensor.untyped_storage()
    except Exception:  # storage-less tensor subclasses
        return None
    if not storage.data_ptr():
        return None
    return (storage.data_ptr(), tensor.storage_offset())


def _pools(pool: Any, seen: set[int]) -> Iterator[Any]:
    """``pool`` and the (sub-)pools it holds (hybrid SWA pools hold a full and an SWA pool)."""
    if id(pool) in seen:
        return
    seen.add(id(pool))
    yield pool
    for value in vars(pool).values():
        if type(value).__module__.startswith("sglang.srt.mem_cache") and hasattr(value, "size"):
            yield from _pools(value, seen)


def kv_pool_buffers(pool: Any) -> dict[str, Any] | None:
    """What SGLang allocated for one runner's KV pool, read from its tensors."""
    if pool is None:
        return None
    seen_storages: set[int] = set()
    parts = []
    for sub in _pools(pool, set()):
        size, page = getattr(sub, "size", None), getattr(sub, "page_size", None) or 1
        rows = size + page if isinstance(size, int) else None
        token_bytes = other_bytes = buffers = 0
        for tensor in tensors_in(list(vars(sub).values())):
            key = _storage_key(tensor)
            if key is None or key[0] in seen_storages:
                continue
            seen_storages.add(key[0])
            nbytes = tensor.untyped_storage().nbytes()
            if rows is not None and tensor.dim() > 0 and tensor.shape[0] == rows:
                token_bytes += nbytes
                buffers += 1
            else:
                other_bytes += nbytes
        layer_lists = [getattr(sub, a, None) for a in ("k_buffer", "kv_buffer")]
        layer_buffers = next((len(v) for v in layer_lists if isinstance(v, (list, tuple))), None)
        # layer_buffers: one K (or latent) buffer per layer the pool was built for.
        parts.append(
            {
                "class": type(sub).__name__, "layer_buffers": layer_buffers, "size": size,
                "page_size": page, "token_rows": rows, "token_buffers": buffers,
                "token_buffer_bytes": token_bytes, "other_bytes": other_bytes,
            }
        )  # fmt: skip
    return {
        "class": type(pool).__name__,
        "layer_num": getattr(pool, "layer_num", None),
        "token_buffer_bytes": sum(p["token_buffer_bytes"] for p in parts),
        "parts": parts,
    }


def tensor_report(runners: list[Any], spec_worker: Any | None) -> dict[str, Any]:
    """``tensors``: ``{"<role>[<i>]/<name>": {kind, shape, dtype, sha256, owner}}`` of every
    model tensor; ``kv_pool_buffers``: :func:`kv_pool_buffers` of each runner's pool."""
    out: dict[str, dict[str, Any]] = {}
    owners: dict[tuple[int, int], str] = {}
    drafts = 0

    def add(key: str, kind: str, tensor: Any) -> None:
        if not hasattr(tensor, "untyped_storage"):  # no hot-token map
            return
        storage = _storage_key(tensor)
        owner = owners.setdefault(storage, key) if storage is not None else None
        rows = None
        if tensor.device.type != "meta" and tensor.dim() >= 2:
            if tensor.shape[0] <= ROW_DIGEST_MAX_ROWS:
                digests = (hashlib.sha256(r.tobytes()) for r in _bytes(tensor, len(tensor), -1))
                rows = [digest.hexdigest()[:16] for digest in digests]
        out[key] = {
            "kind": kind,
            "shape": list(tensor.shape),
            "dtype": str(tensor.dtype),
            "sha256": _digest(tensor),
            "row_sha256": rows,
            "owner": owner,
        }

    for index, runner in enumerate(runners):
        role = "target" if index == 0 else f"runner{index}"
        if getattr(runner, "is_draft_worker", False):
            role = f"draft{drafts}"
            drafts += 1
        model = getattr(runner, "model", None)
        if model is None:
            continue
        for name, tensor in model.named_parameters(remove_duplicate=False):
            add(f"{role}/{name}", "parameter", tensor)
        for name, tensor in model.named_buffers(remove_duplicate=False):
            add(f"{role}/{name}", "buffer", tensor)
        add(f"{role}/hot_token_id", "attribute", getattr(model, "hot_token_id", None))
    draft_worker = getattr(spec_worker, "draft_worker", None)
    add("worker/hot_token_id", "attribute", getattr(draft_worker, "hot_token_id", None))
    return {
        "tensors": out,
        "kv_pool_buffers": [
            {
                "role": "draft" if getattr(r, "is_draft_worker", False) else "target",
                **(kv_pool_buffers(getattr(r, "token_to_kv_pool", None)) or {}),
            }
            for r in runners
        ],
    }
