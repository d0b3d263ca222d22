"""One predicate decides which launches are phased and which keep SGLang's draft reserve."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from harness.checkpoints.published_configs import EXAMPLES
from sglang_specinit.sglang_0_5_13 import draft_workers, tp_worker
from sglang_specinit.sglang_0_5_13 import server_args as server_args_phase
from sglang_specinit.sglang_0_5_13.launch_policy import LaunchFacts, phasing_blocker

H100_MIB = 81559  # what get_device_memory_capacity reports for an H100-80GB
LLAMA = EXAMPLES / "llama31-8b-eagle3" / "target"
EAGLE3_DRAFT = EXAMPLES / "llama31-8b-eagle3" / "draft"
EAGLE3 = ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(EAGLE3_DRAFT))
STANDALONE = ("--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", str(LLAMA))
DSV4_CONFIG = SimpleNamespace(architectures=["DeepseekV4ForCausalLM"], model_type="deepseek_v4")


def facts(**overrides: Any) -> LaunchFacts:
    values: dict[str, Any] = {
        "algorithm": "EAGLE3",
        "device": "cuda",
        "enable_hisparse": False,
        "target_hf_config": lambda: SimpleNamespace(architectures=["LlamaForCausalLM"]),
        **overrides,
    }
    return LaunchFacts(**values)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"algorithm": None}, "not speculative"),
        ({"device": "npu"}, "device 'npu' is not one of"),
        ({"device": "xpu"}, "device 'xpu' is not one of"),
        ({"enable_hisparse": True}, "--enable-hisparse"),
        ({"target_hf_config": lambda: DSV4_CONFIG}, "DeepSeek-V4"),
        ({"compat_problems": ["x.Y is missing"]}, "sglang-specinit is off"),
        # A built-in algorithm on a phased device is phased.
        *(({"device": device}, None) for device in ("cuda", "musa", "cpu")),
    ],
)
def test_launches_kept_stock_and_why(overrides: dict[str, Any], reason: str | None) -> None:
    blocker = phasing_blocker(facts(**overrides))
    assert (blocker is None) if reason is None else reason in (blocker or ""), blocker


def server_args_at_memory_settings(*flags: str) -> Any:
    """A ServerArgs in the state SGLang's __post_init__ has when it calls
    ``_handle_gpu_memory_settings`` (device, defaults and piecewise graphs resolved)."""
    from sglang.srt.server_args import ServerArgs
    from sglang_specinit.planner.releases import installed_replay

    args = installed_replay().parse_launch(["--model-path", str(LLAMA), "--device", "cuda", *flags])
    args.model_config = None
    del args.model_config  # get_model_config builds and caches it, as in a real launch
    ServerArgs._handle_piecewise_cuda_graph(args)
    return args


def fields(args: Any) -> dict[str, Any]:
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(args)}


@pytest.fixture(autouse=True)
def plugin_checks_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    """TEST DOUBLE: no problem from the module checks a server process's plugin makes."""
    from sglang_specinit import compat

    monkeypatch.setattr(compat, "problems_so_far", lambda: [])


def run_heuristic(args: Any, *, hooked: bool) -> Any:
    from sglang.srt.server_args import ServerArgs

    original = ServerArgs._handle_gpu_memory_settings
    trial = copy.deepcopy(args)
    if hooked:
        server_args_phase.handle_gpu_memory_settings(original, trial, H100_MIB)
    else:
        original(trial, H100_MIB)
    return trial


@pytest.mark.parametrize(
    ("flags", "reserve_gib"),
    [
        (EAGLE3, 4),
        (STANDALONE, 6),
        (("--speculative-algorithm", "NGRAM"), 0),
        # Left alone: a user fraction, and a launch not phased (HiSparse), whose stock reserve
        # stays so that stock init keeps room for its draft.
        ((*EAGLE3, "--mem-fraction-static", "0.8"), None),
        ((*EAGLE3, "--enable-hisparse"), None),
    ],
    ids=["EAGLE3", "STANDALONE", "NGRAM", "user-fraction", "hisparse"],
)
def test_only_the_automatic_fraction_loses_the_draft_reserve(
    flags: tuple[str, ...], reserve_gib: int | None
) -> None:
    assert Path(EAGLE3_DRAFT, "config.json").is_file()  # the parse does not read the draft
    args = server_args_at_memory_settings(*flags)
    stock, ours = run_heuristic(args, hooked=False), run_heuristic(args, hooked=True)
    differ = {k for k, v in fields(ours).items() if fields(stock)[k] != v}
    assert differ == ({"mem_fraction_static"} if reserve_gib else set())
    if reserve_gib is None:
        return
    plain = copy.deepcopy(args)
    plain.speculative_algorithm = None
    plain = run_heuristic(plain, hooked=False)
    assert ours.cuda_graph_bs == stock.cuda_graph_bs  # the speculative batch list, not plain's
    assert ours.mem_fraction_static == plain.mem_fraction_static
    if reserve_gib:  # stock reserves 4 GiB (6 for STANDALONE) more for the draft
        assert stock.mem_fraction_static == pytest.approx(
            plain.mem_fraction_static - reserve_gib * 1024 / H100_MIB, abs=1.5e-3
        )
        assert getattr(ours, server_args_phase.STOCK_FRACTION_ATTR) == stock.mem_fraction_static
        # A launch declined later gets the stock fraction back, once.
        assert server_args_phase.restore_stock_fraction(ours) == stock.mem_fraction_static
        assert ours.mem_fraction_static == stock.mem_fraction_static
        assert not hasattr(ours, server_args_phase.STOCK_FRACTION_ATTR)
        assert server_args_phase.restore_stock_fraction(ours) is None


def test_weight_sums_survive_tensor_subclasses_without_storage() -> None:
    import torch
    from sglang_specinit.live_sizing import storage_bytes

    class StoragelessWrapper(torch.Tensor):
        """A wrapper subclass, like torchao's quantized weights: no storage of its own."""

        @staticmethod
        def __new__(cls, inner: torch.Tensor) -> StoragelessWrapper:
            return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)

        def __init__(self, inner: torch.Tensor) -> None:
            self.inner = inner

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
            raise NotImplementedError(func)

    wrapped = StoragelessWrapper(torch.zeros(8, dtype=torch.bfloat16))
    with pytest.raises((RuntimeError, NotImplementedError)):
        wrapped.untyped_storage().data_ptr()  # what the old code called
    module = torch.nn.Module()
    module.register_buffer("quantized", wrapped)
    module.plain = torch.nn.Parameter(torch.zeros(4, dtype=torch.float32))
    assert sorted(storage_bytes([module]).values()) == [16, 16]
    plain_only = torch.nn.Module()
    plain_only.plain = module.plain  # shared, as a bound embed/lm_head is
    assert sum(storage_bytes([module], exclude=storage_bytes([plain_only])).values()) == 16


def test_only_a_worker_with_its_own_phase_methods_is_phased() -> None:
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    class Plain:
        pass

    class InheritsGenericPhases:
        # What a TpModelWorker subclass sees once the plugin has added its generic methods.
        alloc_memory_pool = tp_worker.alloc_memory_pool
        init_backends = tp_worker.init_backends

    class OwnPhases(InheritsGenericPhases):
        def alloc_memory_pool(self, *args: object) -> None: ...

        def init_backends(self) -> None: ...

    class OnlyOne:
        def alloc_memory_pool(self, *args: object) -> None: ...

    class PhasedBase:
        # What EAGLEWorkerV2 looks like in a server process once the plugin patched it.
        alloc_memory_pool = draft_workers.worker_alloc_memory_pool
        init_backends = draft_workers.worker_init_backends

    class CustomEagleWorker(PhasedBase):
        def __init__(self) -> None:
            self.pool_size_read_after_super_init = True

    class RealSubclass(EAGLEWorkerV2):
        pass

    blocked = (Plain, InheritsGenericPhases, OnlyOne, CustomEagleWorker, RealSubclass)
    for worker_class in (*blocked, OwnPhases, EAGLEWorkerV2):  # a plugin-registered algorithm's
        reason = phasing_blocker(facts(algorithm="TINY_CUSTOM", worker_class=worker_class))
        if worker_class not in blocked:
            assert reason is None, reason
            continue
        assert reason is not None and worker_class.__name__ in reason
        assert "does not implement alloc_memory_pool/init_backends itself" in reason
