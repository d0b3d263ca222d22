"""Early binding where 0.5.23 keeps stock sizing: pipeline parallelism, PP 2 on device cpu.

``SGLANG_ENABLE_PP_SPEC=1`` gives the draft to the last stage only
(``managers/scheduler.py:1041-1050``). That stage's target has no input embedding, so 0.5.23
loads the draft's own from the checkpoint (``speculative/pp_draft_embedding.py:251-266``) and
binds only the lm_head; the first stage holds no draft. Both stages step aside (stock prices
per stage) and the launch's token count is the minimum over stages
(``mem_cache/kv_cache_configurator.py:3108-3115``).

Checked on a real PP 2 EAGLE launch (two scheduler processes, ~2.5 min): the last stage binds
``lm_head.weight`` before profiling and says how many MiB that freed, exactly the bytes of the
target checkpoint's lm_head (the draft's own copy until bound); the first stage binds
nothing. Slow: the only PP launch. In CI
``test_never_worse_than_stock.py`` runs the same reserve check (``stock_binding``) on 0.5.23's
own configurators of every published layout and checks stock's sizing after the binding.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.launch.engine import cpu_engine

pytestmark = pytest.mark.slow

MIB = 1 << 20
STEP_ASIDE = re.compile(
    r"(?P<stage>PP\d)\] \[specinit\] stock sglang 0\.5\.23 KV sizing: (?P<rest>.*)"
)
TOKENS = re.compile(r"(?P<stage>PP\d)\] max_total_num_tokens=(?P<tokens>\d+)")


def _pp2_log(work: Path, plugin: bool) -> str:
    with cpu_engine(
        llama_family.tiny_llama_target(),
        draft_model_path=eagle_drafts.tiny_eagle_draft(),
        algorithm="EAGLE",
        plugin=plugin,
        work_dir=work,
        startup_timeout_s=900,
        extra_env={"SGLANG_ENABLE_PP_SPEC": "1", "SGLANG_CPU_OMP_THREADS_BIND": "0|1"},
        pp_size=2,
        disable_overlap_schedule=True,
    ) as engine:
        return engine.log_path.read_text(errors="replace")


def _checkpoint_tensor_bytes(checkpoint: Path, name: str) -> int:
    """Bytes of one tensor in a safetensors checkpoint, from its header."""
    for shard in sorted(checkpoint.glob("*.safetensors")):
        raw = shard.read_bytes()
        (length,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + length])
        if name in header:
            start, end = header[name]["data_offsets"]
            return end - start
    raise KeyError(name)


@pytest.fixture(scope="module")
def pp2(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, str]:
    root = tmp_path_factory.mktemp("pp2")
    return {plugin: _pp2_log(root / str(plugin), plugin) for plugin in (True, False)}


def test_last_stage_binds_lm_head_before_profiling_and_says_what_it_freed(pp2) -> None:
    lines = {m["stage"]: m["rest"] for m in STEP_ASIDE.finditer(pp2[True])}
    assert set(lines) == {"PP0", "PP1"}
    assert all("pipeline parallelism (PP 2)" in rest for rest in lines.values())
    assert "bound" not in lines["PP0"]  # the first stage holds no draft
    freed = re.search(r"bound lm_head\.weight to .*: ([\d.,]+) MiB freed", lines["PP1"])
    assert freed, lines["PP1"]
    # The EAGLE draft checkpoint carries no lm_head: the draft model's own is the target's
    # shape and dtype until 0.5.23 binds it, so it frees the target checkpoint's tensor size.
    lm_head = _checkpoint_tensor_bytes(llama_family.tiny_llama_target(), "lm_head.weight")
    assert float(freed[1].replace(",", "")) == pytest.approx(lm_head / MIB, abs=0.05)


def test_stock_sizing_serves_at_least_stock_tokens(pp2) -> None:
    on = {m["stage"]: int(m["tokens"]) for m in TOKENS.finditer(pp2[True])}
    off = {m["stage"]: int(m["tokens"]) for m in TOKENS.finditer(pp2[False])}
    assert set(on) == set(off) == {"PP0", "PP1"}
    assert len(set(on.values())) == 1  # stock's all-stage minimum
    assert on["PP0"] >= off["PP0"]
