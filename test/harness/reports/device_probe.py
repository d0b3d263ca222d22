"""Device-memory probe in SGLang's scheduler process, the same for stock SGLang and the plugin."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PROBE_ENV = "SPECINIT_TEST_DEVICE_PROBE"
PROBE_DIR_ENV = "SPECINIT_TEST_PROBE_DIR"
GIB = 1 << 30
_RUNNER = "sglang.srt.model_executor.model_runner.ModelRunner"
POOL_METHOD = "init_memory_pool"
# ModelRunner steps after the pool whose memory is meant to come from the 1 - f share.
POST_POOL_METHODS = tuple(
    "init_cublas init_attention_backend kernel_warmup"
    " _pre_initialize_flashinfer_allreduce_workspace init_device_graphs"
    " init_piecewise_cuda_graphs prealloc_symmetric_memory_pool".split()
)
# What a correct launch may exceed the budget by: the KV pools' small bookkeeping tensors,
# which no budget prices (a draft pool left out of the budget is hundreds of MiB on a GPU).
BOOKKEEPING_TOLERANCE_BYTES = 4 << 20
# Tensors SGLang allocates before its pools besides weights (workspaces, tables): tens of MiB; a
# draft's duplicate embed/lm_head (0.5-1 GiB for Llama-3) fails this by a wide margin.
STRAY_TENSOR_TOLERANCE_BYTES = 256 << 20
_seq = itertools.count()
_seen_table_storages: set[int] = set()
_seen_weight_storages: set[int] = set()


def _reading(runner: Any) -> dict[str, Any]:
    """Free bytes by SGLang's meter (this rank, cache emptied) and torch's CUDA counters."""
    from sglang.srt.utils import common

    free_gib = common.get_available_gpu_memory(
        runner.device, runner.gpu_id, distributed=False, empty_cache=True
    )
    reading: dict[str, Any] = {"free_bytes": int(round(free_gib * GIB))}
    if runner.device == "cuda":
        import torch

        reading["torch_allocated_bytes"] = int(torch.cuda.memory_allocated())
        reading["torch_reserved_bytes"] = int(torch.cuda.memory_reserved())
    return reading


def _tensors(root: Any) -> list[Any]:
    """The tensors within 3 objects of a pool/allocator object, not inside KV caches (KV pool)."""
    import torch
    from sglang.srt.mem_cache.memory_pool import KVCache

    found = []
    stack: list[tuple[Any, int]] = [(root, 3)]
    visited: set[int] = set()
    while stack:
        obj, left = stack.pop()
        if id(obj) in visited or obj is None:
            continue
        visited.add(id(obj))
        if isinstance(obj, torch.Tensor):
            found.append(obj)
        elif isinstance(obj, (list, tuple)):
            stack += [(v, left) for v in obj]
        elif isinstance(obj, dict):
            stack += [(v, left) for v in obj.values()]
        elif (
            left > 0
            and not isinstance(obj, KVCache)
            and type(obj).__module__.startswith("sglang.srt.mem_cache")
            and hasattr(obj, "__dict__")
        ):
            stack += [(v, left - 1) for v in vars(obj).values()]
    return found


def _new_bytes(tensors: Any, device_type: str, seen: set[int]) -> int:
    """Bytes of the ``device_type`` storages behind ``tensors`` not in ``seen`` (then added)."""
    new: dict[int, int] = {}
    for tensor in tensors:
        storage = tensor.untyped_storage() if tensor.device.type == device_type else None
        if storage is not None and storage.data_ptr() and storage.data_ptr() not in seen:
            new[storage.data_ptr()] = storage.nbytes()
    seen.update(new)
    return sum(new.values())


def _write(record: dict[str, Any]) -> None:
    directory = os.environ.get(PROBE_DIR_ENV)
    if not directory:
        return
    record["seq"] = next(_seq)
    with open(Path(directory) / f"device-probe-{os.getpid()}.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


def _who(runner: Any) -> dict[str, Any]:
    from harness.gpu.storage_identity import runner_tp_rank

    return {
        "is_draft": bool(getattr(runner, "is_draft_worker", False)),
        "draft_model_idx": getattr(runner, "draft_model_idx", None),
        "tp_rank": runner_tp_rank(runner),
    }


def around_init_torch_distributed(original: Callable[..., Any], self: Any) -> Any:
    """Record SGLang's pre-load free-memory reading (0.5.23: ``pre_model_load_memory``)."""
    result = original(self)
    pre_load_gib = result if isinstance(result, (int, float)) else self.pre_model_load_memory
    _write({"event": "pre_load", **_who(self), "free_bytes": int(round(pre_load_gib * GIB))})
    return result


def around_init_memory_pool(original: Callable[..., Any], self: Any, *args: Any, **kw: Any) -> Any:
    """Readings around one runner's pool allocation: weights held on entry, tables and KV made."""
    import torch

    # The model's tensors not counted at an earlier pool entry (shared ones count once).
    model = getattr(self, "model", None)
    weights = [*model.parameters(), *model.buffers()] if isinstance(model, torch.nn.Module) else []
    weight_bytes = _new_bytes(weights, self.device, _seen_weight_storages)
    _write({"event": "enter", "method": POOL_METHOD, **_who(self), **_reading(self),
            "weight_bytes": weight_bytes})  # fmt: skip
    result = original(self, *args, **kw)
    # New req-to-token and allocator tensors' bytes, the KV pool's bytes and token capacity.
    roots = (self.req_to_token_pool, getattr(self, "token_to_kv_pool_allocator", None))
    tables = [t for root in roots for t in _tensors(root)]
    pool = getattr(self, "token_to_kv_pool", None)
    sizes = pool.get_kv_size_bytes() if hasattr(pool, "get_kv_size_bytes") else 0
    _write({"event": "exit", "method": POOL_METHOD, **_who(self), **_reading(self),
            "table_bytes": _new_bytes(tables, self.device, _seen_table_storages),
            "kv_bytes": int(sum(sizes)) if isinstance(sizes, tuple) else int(sizes),
            "kv_tokens": int(getattr(pool, "size", 0) or 0),
            "page_size": int(getattr(self, "page_size", 1) or 1),
            "mem_fraction_static": self.mem_fraction_static})  # fmt: skip
    return result


def _around_post_pool(method: str) -> Callable[..., Any]:
    def around(original: Callable[..., Any], self: Any, *args: Any, **kw: Any) -> Any:
        _write({"event": "enter", "method": method, **_who(self), **_reading(self)})
        try:
            return original(self, *args, **kw)
        finally:
            _write({"event": "exit", "method": method, **_who(self), **_reading(self)})

    around.__name__ = f"around_{method}"
    return around


def probe_hooks() -> list[tuple[str, Callable[..., Any], str]]:
    """(target, hook, HookType name) of the probe's AROUND hooks, for the sitecustomize."""
    from harness.gpu import storage_identity

    # 0.5.23 allocates pools after both models loaded and builds its backends and graphs after
    # every pool. The records keep 0.5.13's method name either way.
    pool_method = storage_identity.pool_method()
    post_pool = POST_POOL_METHODS if pool_method == POOL_METHOD else ()
    hooks = [
        ("init_torch_distributed", around_init_torch_distributed),
        (pool_method, around_init_memory_pool),
        *((m, _around_post_pool(m)) for m in post_pool),
    ]
    return [(f"{_RUNNER}.{method}", hook, "AROUND") for method, hook in hooks]


def scheduler_records(directory: Path) -> list[list[dict[str, Any]]]:
    """The record lists of the processes that allocated KV pools (one per TP rank)."""
    found = []
    for path in sorted(directory.glob("device-probe-*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines() if line]
        if any(r.get("method") == POOL_METHOD for r in records):
            found.append(records)
    return found


@dataclass(frozen=True)
class UsageAfterPools:
    """Device memory of one rank at the moment its last KV pool exists, taken apart."""

    pre_load_free_bytes: int
    budget_bytes: int
    used_bytes: int
    outside_budget_phases_bytes: int
    table_bytes: int
    allocator_slack_bytes: int
    untracked_bytes: int
    kv_bytes: int
    draft_kv_bytes: int
    weight_bytes: int = 0
    sizing_residue_bytes: int | None = None
    page_bytes: int = 0

    @property
    def fill_shortfall_bytes(self) -> int | None:
        if self.sizing_residue_bytes is None:
            return None
        return self.budget_bytes - self.weight_bytes - self.kv_bytes - self.sizing_residue_bytes

    @property
    def counted_bytes(self) -> int:
        return (
            self.used_bytes
            - self.outside_budget_phases_bytes
            - self.table_bytes
            - self.allocator_slack_bytes
            - self.untracked_bytes
        )

    @property
    def over_budget_bytes(self) -> int:
        return self.counted_bytes - self.budget_bytes

    def describe(self) -> str:
        """Every field and derived number, in MiB."""
        derived = ("counted_bytes", "over_budget_bytes", "fill_shortfall_bytes")
        values = {**asdict(self), **{name: getattr(self, name) for name in derived}}
        return ", ".join(
            f"{name.removesuffix('_bytes')} {value / (1 << 20):.1f} MiB"
            for name, value in values.items()
            if value is not None
        )


def usage_after_pools(records: list[dict[str, Any]]) -> UsageAfterPools:
    """Take apart one scheduler process's device memory when its last KV pool was built."""
    pre_loads = [r for r in records if r["event"] == "pre_load" and not r["is_draft"]]
    if not pre_loads:
        raise ValueError("the probe saw no pre-load reading of the target runner")
    pre = pre_loads[0]["free_bytes"]
    # (enter, exit) pairs of the process's method calls (calls of one method never nest).
    open_calls: dict[tuple[str, bool, Any], dict[str, Any]] = {}
    calls = []
    for r in records:
        key = (r.get("method"), r.get("is_draft"), r.get("draft_model_idx"))
        if r["event"] == "enter":
            open_calls[key] = r
        elif r["event"] == "exit" and key in open_calls:
            calls.append((open_calls.pop(key), r))
    pools = [(a, b) for a, b in calls if a["method"] == POOL_METHOD]
    if not pools:
        raise ValueError("the probe saw no KV pool allocation")
    last_exit = pools[-1][1]
    outside = sum(
        a["free_bytes"] - b["free_bytes"]
        for a, b in calls
        if a["method"] in POST_POOL_METHODS and b["seq"] < last_exit["seq"]
    )
    slack = untracked = 0
    for a, b in pools:
        if "torch_reserved_bytes" in a:
            device_delta = a["free_bytes"] - b["free_bytes"]
            reserved_delta = b["torch_reserved_bytes"] - a["torch_reserved_bytes"]
            allocated_delta = b["torch_allocated_bytes"] - a["torch_allocated_bytes"]
            slack += max(0, reserved_delta - allocated_delta)
            untracked += max(0, device_delta - reserved_delta)
    first_enter = pools[0][0]
    residue = None
    if "torch_allocated_bytes" in first_enter:
        residue = pre - first_enter["free_bytes"] - first_enter["torch_allocated_bytes"]
    fraction = last_exit["mem_fraction_static"]
    return UsageAfterPools(
        pre_load_free_bytes=pre,
        budget_bytes=int(fraction * pre),
        used_bytes=pre - last_exit["free_bytes"],
        outside_budget_phases_bytes=outside,
        table_bytes=sum(b["table_bytes"] for _, b in pools),
        allocator_slack_bytes=slack,
        untracked_bytes=untracked,
        kv_bytes=sum(b["kv_bytes"] for _, b in pools),
        draft_kv_bytes=sum(b["kv_bytes"] for _, b in pools if b["is_draft"]),
        weight_bytes=sum(a.get("weight_bytes", 0) for a, _ in pools),
        sizing_residue_bytes=residue,
        # One page of a pool: its buffers hold ``kv_tokens + page_size`` tokens.
        page_bytes=sum(
            -(-b["kv_bytes"] * b.get("page_size", 1) // (b["kv_tokens"] + b.get("page_size", 1)))
            for _, b in pools
            if b.get("kv_tokens", 0) > 0
        ),
    )
