"""What goes wrong on the ``sglang_0_5_23`` generation beyond the refused rows: the hook reads
what resolution decided, and an fp8 target KV with a bf16 draft is left to stock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness.checkpoints import eagle_drafts, llama_family
from harness.checkpoints.eagle_drafts import TP2_EAGLE3_DRAFT
from harness.launch.engine import assert_ended_cleanly, cpu_engine_kwargs, run_server_to_end
from harness.launch.launch_0_5_23 import ENGINE_TIMEOUT_S
from harness.matrices.plan_verdicts import ALGORITHM, SPEC_FLAGS, error_lines, intact_draft

pytestmark = [pytest.mark.cpu_engine, pytest.mark.timeout(ENGINE_TIMEOUT_S * 2)]

BOUND_S = float(ENGINE_TIMEOUT_S)
FP8_KV = "fp8_e4m3"


def resolved_server_args(
    target: Path, draft: Path, algorithm: str = ALGORITHM, **flags: Any
) -> Any:
    """A 0.5.23 ``ServerArgs`` resolved as its launcher resolves it (no process started)."""
    from sglang.srt.server_args import ServerArgs

    kwargs = cpu_engine_kwargs(target, draft_model_path=draft, algorithm=algorithm, **flags)
    server_args = ServerArgs(**{k: v for k, v in kwargs.items() if v is not None})
    server_args.resolve_once()
    return server_args


def test_0_5_23_hook_reads_what_resolution_decided(tmp_path: Path) -> None:
    from harness.checkpoints import gemma4_mtp
    from sglang.srt.arg_groups.overrides import resolving_view
    from sglang_specinit.launch_checks import LaunchCheckError, check_speculative_launch
    from sglang_specinit.sglang_0_5_23.launch_checks import check_launch

    target, draft = llama_family.tiny_llama_target(), intact_draft(tmp_path)
    # An automatic fraction and page size: None in the fields, decided by resolution.
    automatic = resolved_server_args(target, draft, mem_fraction_static=None, page_size=None)
    assert automatic.mem_fraction_static is None and automatic.page_size is None
    assert 0 < resolving_view(automatic).mem_fraction_static < 1
    check_launch(automatic)
    refused = resolved_server_args(target, draft, **SPEC_FLAGS, max_total_tokens=8, page_size=16)
    with pytest.raises(LaunchCheckError, match="--max-total-tokens 8 leaves no KV pool with"):
        check_launch(refused)
    # A Gemma 4 assistant (hidden 32, the target's 64) given as EAGLE: 0.5.23 promotes it to
    # FROZEN_KV_MTP and starts it; read from the raw field, the width check would refuse it.
    gemma4 = gemma4_mtp.tiny_gemma4_target()
    assistant = gemma4_mtp.tiny_gemma4_assistant()
    promoted = resolved_server_args(gemma4, assistant, "EAGLE", attention_backend="triton")
    assert promoted.speculative_algorithm == "EAGLE"
    assert resolving_view(promoted).speculative_algorithm == "FROZEN_KV_MTP"
    check_launch(promoted)
    with pytest.raises(LaunchCheckError, match="draft hidden_size 32"):
        check_speculative_launch(
            algorithm=promoted.speculative_algorithm,
            mem_fraction_static=0.5,
            max_total_tokens=None,
            page_size=1,
            model_path=str(gemma4),
            draft_path=str(assistant),
        )


# CI: nothing (two launches that repeat the EAGLE3 pair with one flag changed); the plugin's
# fp8 prices are checked per pool class on 0.5.13.post1 (test/sglang_0_5_13/test_pool_parity.py).
@pytest.mark.slow
def test_fp8_target_kv_with_a_bf16_draft_is_left_to_stock(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    runs = {}
    for plugin in (True, False):
        run = run_server_to_end(
            llama_family.tiny_llama_target(),
            tmp_path / f"plugin-{'on' if plugin else 'off'}",
            plugin=plugin,
            bound_s=BOUND_S,
            draft_model_path=eagle_drafts.tiny_eagle3_draft(TP2_EAGLE3_DRAFT),
            algorithm=ALGORITHM,
            kv_cache_dtype=FP8_KV,
            **SPEC_FLAGS,
        )
        request.node.user_properties.append((f"elapsed_s_plugin_{plugin}", round(run.elapsed_s, 1)))
        assert_ended_cleanly(run)
        runs[plugin] = run
    on, off = runs[True], runs[False]
    assert "LaunchCheckError" not in on.log
    # The scheduler ran (its own error report: Scheduler.__init__ raised stock's error).
    assert [r for r in on.reports if "error" in r], on.rank_tails()
    message = error_lines(on.log)[-1]
    request.node.user_properties.append(("message", message))
    assert message == error_lines(off.log)[-1]
