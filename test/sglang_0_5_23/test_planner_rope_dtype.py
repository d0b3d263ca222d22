"""The planner's rotary-cache dtype answers the planned device alone (0.5.23).

0.5.23's ``RotaryEmbedding.__init__`` keeps the cos/sin cache in fp32 on CUDA, HIP and XPU
and under ``SGLANG_ROPE_CACHE_FP32`` (flags bound in ``layers/rotary_embedding/base.py`` at
import, the switch read at build), and casts it to the model's dtype elsewhere. The planner
builds the cache for the planned device (``planner/target_buffers.rope_built_for``): here
the host is made to answer HIP, XPU and the switch on (the flags set on SGLang's module, the
variable in the environment), and a ``--device cpu`` plan must still be bf16, a CUDA plan
fp32, and the host's answers must be SGLang's again afterwards. No Engine; a few seconds.
"""

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
