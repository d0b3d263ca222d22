"""The planner's rotary-cache dtype answers the planned device alone (0.5.23)."""

from __future__ import annotations

import json
import os

import pytest
from sglang_specinit.planner.cli import main

EXAMPLE = "llama31-8b-eagle3"


def _cache_item(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(["plan", "--example", EXAMPLE, "--json", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    (item,) = json.loads(out)["target_buffers"]["items"]
    return item


def test_a_hip_xpu_or_fp32_switch_host_does_not_set_the_planned_dtype(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang.srt.layers.rotary_embedding import base

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(base, "_is_hip", True)
    monkeypatch.setattr(base, "_is_xpu", True)
    monkeypatch.setenv("SGLANG_ROPE_CACHE_FP32", "1")
    cpu = _cache_item(capsys, "--device", "cpu", "--device-memory", str(80 << 30))
    cuda = _cache_item(capsys)
    assert cpu.endswith("bfloat16") and cuda.endswith("float32")
    assert (base._is_hip, base._is_xpu) == (True, True)
    assert os.environ["SGLANG_ROPE_CACHE_FP32"] == "1"
