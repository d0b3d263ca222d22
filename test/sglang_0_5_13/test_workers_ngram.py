"""NGRAM (``NGRAMWorker``): what can be checked without a GPU."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sglang_specinit import compat
from sglang_specinit.sglang_0_5_13 import launch_policy
from sglang_specinit.sglang_0_5_13 import scheduler as scheduler_phases
from sglang_specinit.sglang_0_5_13.state import deferring_pools

NGRAM_MODULE = "sglang.srt.speculative.ngram_worker"


def _fake_ngram_worker_class(module: str = NGRAM_MODULE, name: str = "NGRAMWorker") -> type:
    """A class that carries NGRAMWorker's identity (module and qualified name) and nothing else."""
    return type(name, (), {"__module__": module, "__qualname__": name})


def test_ngram_needs_sgl_kernel_at_import_and_sglang_refuses_it_off_cuda() -> None:
    spec = importlib.util.find_spec(NGRAM_MODULE)
    assert spec is not None and spec.origin is not None
    top_level = set()
    for node in ast.parse(Path(spec.origin).read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            top_level.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            top_level |= {alias.name.split(".")[0] for alias in node.names}
    assert "sgl_kernel" in top_level
    assert importlib.util.find_spec("sgl_kernel") is None, "sgl_kernel is installed here"
    with pytest.raises(ModuleNotFoundError) as excinfo:
        importlib.import_module(NGRAM_MODULE)
    assert excinfo.value.name == "sgl_kernel"
    from sglang.srt.arg_groups.speculative_hook import _handle_ngram

    with pytest.raises(ValueError, match="only supports CUDA device"):
        _handle_ngram(SimpleNamespace(device="cpu"))


def test_ngram_is_model_less_by_name() -> None:
    assert launch_policy.is_model_less_worker(_fake_ngram_worker_class())
    assert not launch_policy.is_model_less_worker(
        _fake_ngram_worker_class(module="my_plugin.ngram")
    )
    assert not launch_policy.is_model_less_worker(_fake_ngram_worker_class(name="NGRAMWorkerV2"))
    assert (NGRAM_MODULE, "NGRAMWorker") in launch_policy.MODEL_LESS_WORKERS


class _StubScheduler:
    """Just what ``init_model_worker`` touches; every step records itself."""

    def __init__(self, worker_class: type) -> None:
        self.events: list[tuple[str, bool]] = []
        self.server_args = SimpleNamespace(
            device="cuda",
            enable_hisparse=False,
            speculative_algorithm="NGRAM",
            speculative_draft_model_path=None,
        )
        self.model_config = SimpleNamespace(
            hf_config=SimpleNamespace(architectures=["LlamaForCausalLM"])
        )
        self.spec_algorithm = SimpleNamespace(
            is_none=lambda: False, create_worker=lambda server_args: worker_class
        )
        self.draft_worker: Any = "unset"

    def _record(self, step: str) -> None:
        self.events.append((step, deferring_pools()))

    def init_tp_model_worker(self) -> None:
        self._record("target worker")

    def maybe_init_draft_worker(self) -> None:
        self._record("NGRAM worker")
        self.draft_worker = "ngram"

    def init_target_memory_pool(self) -> None:
        self._record("target pool")

    init_memory_pools = scheduler_phases.init_memory_pools

    def init_all_backends(self) -> None:
        self._record("backends")


def test_ngram_worker_is_built_in_the_pool_phase_after_the_target_pool(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = _StubScheduler(_fake_ngram_worker_class())
    monkeypatch.setattr(scheduler_phases, "log_memory_breakdown", lambda s: s._record("breakdown"))
    # Test double: the stub's device is "cuda" (NGRAM needs it); no driver to read after pools.
    monkeypatch.setattr(
        scheduler_phases,
        "cuda_memory_after_pools",
        lambda server_args: scheduler._record("cuda reading") or {},
    )

    def stock_init_model_worker(s: _StubScheduler) -> None:
        # SGLang's own method calls both loads again; the phased init has made them no-ops.
        s.init_tp_model_worker()
        s.maybe_init_draft_worker()
        s._record("stock remainder")

    # Test double: no problem from the module checks a server process's plugin makes.
    monkeypatch.setattr(compat, "problems_for", lambda module_names: [])
    assert launch_policy.phasing_blocker(launch_policy.facts_from_scheduler(scheduler)) is None
    with caplog.at_level(logging.INFO, logger=scheduler_phases.__name__):
        scheduler_phases.init_model_worker(stock_init_model_worker, scheduler)
    assert scheduler.events == [
        ("target worker", True),  # weights only: pools deferred
        ("target pool", False),
        ("NGRAM worker", False),  # needs the target's pools and request count
        ("cuda reading", False),  # every pool exists, no graph yet
        ("backends", False),
        ("breakdown", False),
        ("stock remainder", False),
    ]
    assert scheduler.draft_worker == "ngram"
    assert "phase 2/4 load draft weights: none, NGRAMWorker has no model" in caplog.text
    # The stand-ins installed for the stock remainder are gone again.
    assert "init_tp_model_worker" not in vars(scheduler)
    assert "maybe_init_draft_worker" not in vars(scheduler)
