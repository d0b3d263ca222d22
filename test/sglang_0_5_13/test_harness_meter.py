"""Fast checks of the harness pieces that need no Engine: the memory meter and tiny models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from harness.checkpoints import llama_layout
from harness.checkpoints.eagle_drafts import tiny_eagle3_draft
from harness.cpu_doubles import shims


def test_meter_counts_each_storage_once() -> None:
    before = shims.live_cpu_tensor_bytes()
    block = torch.zeros(1 << 18, dtype=torch.float32)  # 1 MiB
    view = block[: 1 << 10]
    param = torch.nn.Parameter(block.view(512, 512), requires_grad=False)
    assert shims.live_cpu_tensor_bytes() - before == 1 << 20
    del block, view, param
    assert shims.live_cpu_tensor_bytes() == before


def test_simulated_available_memory_is_capacity_minus_tensors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def host_ram_must_not_be_read() -> None:
        raise AssertionError("host RAM was read")

    monkeypatch.setattr("psutil.virtual_memory", host_ram_must_not_be_read)
    monkeypatch.setattr(shims, "_meter", shims.SimulatedDeviceMemory(64 << 20))
    hold = torch.zeros(4 << 20, dtype=torch.uint8)
    gib = shims.simulated_get_available_gpu_memory(lambda *a: pytest.fail("delegated"), "cpu", 0)
    used = shims.used_bytes()
    assert gib * (1 << 30) == pytest.approx((64 << 20) - used, abs=1)
    assert used >= hold.numel()
    reading = shims.device_meter().readings[-1]
    assert reading.caller.endswith("test_simulated_available_memory_is_capacity_minus_tensors")
    assert shims.simulated_get_device_memory_capacity(lambda d: 0, "cpu") == 64
    # Any other device goes to the real function.
    assert shims.simulated_get_available_gpu_memory(lambda *a: 7.0, "cuda", 0) == 7.0


def test_tiny_models_are_cached_by_parameters(tmp_path: Path) -> None:
    shape = llama_layout.TinyLlamaShape(
        hidden=32, heads=2, kv_heads=1, head_dim=16, vocab=128, layers=1
    )
    no_mtp = {"cache_root": tmp_path, "num_nextn_predict_layers": 0}
    a = tiny_eagle3_draft(shape, **no_mtp)
    assert tiny_eagle3_draft(shape, **no_mtp) == a
    b = tiny_eagle3_draft(shape, cache_root=tmp_path)
    assert a != b
    config = json.loads((a / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["num_nextn_predict_layers"] == 0
    assert (config["num_key_value_heads"], config["head_dim"]) == (1, 16)
    assert "num_nextn_predict_layers" not in json.loads((b / "config.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([a.name, b.name])  # no temp dirs


def test_each_rank_can_simulate_its_own_device_capacity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(shims.CAPACITY_ENV, str(256 << 20))
    monkeypatch.setenv(shims.PER_DEVICE_CAPACITY_ENV, f"{256 << 20},{232 << 20}")
    assert shims.capacity_for_device(None) == 256 << 20
    assert shims.capacity_for_device(1) == 232 << 20
    assert shims.capacity_for_device(5) == 256 << 20  # no entry: the common capacity
    monkeypatch.setattr(shims, "_meter", shims.SimulatedDeviceMemory(256 << 20))
    meter = shims.bind_meter_to_device(1)
    assert (meter.capacity_bytes, meter.gpu_id) == (232 << 20, 1)
    meter.record(collect=False)
    with pytest.raises(RuntimeError, match="cannot rebind it to gpu 0"):
        shims.bind_meter_to_device(0)
    assert shims.bind_meter_to_device(1) is meter  # the same device again is fine


def test_pynccl_is_turned_off_on_device_cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import sglang.srt.utils as sglang_utils

    def original(group_ranks, local_rank, backend, use_pynccl=None, group_name=None):  # noqa: ANN001, ANN202
        return use_pynccl

    monkeypatch.setattr(sglang_utils, "is_cpu", lambda: True)
    assert shims.model_parallel_group_without_pynccl(original, [[0, 1]], 0, "gloo") is False
    assert shims.model_parallel_group_without_pynccl(original, [[0, 1]], 0, "gloo", True) is False
    monkeypatch.setattr(sglang_utils, "is_cpu", lambda: False)
    assert shims.model_parallel_group_without_pynccl(original, [[0, 1]], 0, "nccl") is None


def test_log_lines_are_grouped_by_rank_tag() -> None:
    from harness.launch.processes import format_rank_tails, rank_log_lines

    log = "\n".join(
        [
            "[2026-01-01 00:00:00] launcher starts",
            "[2026-01-01 00:00:01 TP0] rank 0 loads",
            "[2026-01-01 00:00:01 DP1 TP1] rank 1 loads",
            "Traceback (most recent call last):",
            "OSError: boom",
            "[2026-01-01 00:00:02 TP0] rank 0 waits",
            # A progress bar ends without a newline; the next rank's record starts after it.
            "Loading:   0% | 0/1 [2026-01-01 00:00:03 DP1 TP1] rank 1 fails: Traceback",
            "RuntimeError: draft",
        ]
    )
    groups = rank_log_lines(log)
    assert sorted(groups) == ["DP1 TP1", "TP0", "launcher"]
    assert "OSError: boom" in groups["DP1 TP1"]  # a traceback follows its rank's line
    assert groups["TP0"][-2].endswith("rank 0 waits")
    assert groups["TP0"][-1] == "Loading:   0% | 0/1 "
    assert groups["DP1 TP1"][-2:] == [
        "[2026-01-01 00:00:03 DP1 TP1] rank 1 fails: Traceback",
        "RuntimeError: draft",
    ]
    assert "--- last 1 lines of TP0 ---" in format_rank_tails(log, lines=1)
