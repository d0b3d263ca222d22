"""A plugin-registered speculative algorithm (``SpeculativeAlgorithm.register``): stock init."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from harness.checkpoints import llama_family
from harness.launch.engine import ENGINE_TEST_TIMEOUT_S
from harness.launch.server_process import PLUGIN_ENTRY_POINT, SITE_DIR
from harness.reports.report_reading import F, kv_buffer_bytes, runner
from test_workers_common import CAPACITY, MIN_STOCK_OVERSHOOT, STOCK_WARNING, start_engine

pytestmark = pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S)

ALGORITHM = "TINY_CUSTOM"
PLUGIN_NAME = "tiny_custom_spec"
PLUGIN_MODULE = "specinit_test_custom_spec"
WORKER = "TinyCustomDraftWorker"

PLUGIN_SOURCE = f'''
"""Test-only SGLang general plugin: registers the {ALGORITHM} speculative algorithm."""

ALGORITHM = "{ALGORITHM}"


def _worker_class():
    from sglang.srt.managers.tp_worker import TpModelWorker

    class {WORKER}(TpModelWorker):
        """A draft TpModelWorker on the target's allocator (no phase methods of its own)."""

        def __init__(self, server_args, gpu_id, tp_rank, dp_rank, moe_ep_rank, attn_cp_rank,
                     moe_dp_rank, nccl_port, target_worker):
            req_to_token_pool, allocator = target_worker.get_memory_pool()
            super().__init__(
                server_args=server_args, gpu_id=gpu_id, tp_rank=tp_rank, pp_rank=0,
                dp_rank=dp_rank, moe_ep_rank=moe_ep_rank, attn_cp_rank=attn_cp_rank,
                moe_dp_rank=moe_dp_rank, nccl_port=nccl_port, is_draft_worker=True,
                req_to_token_pool=req_to_token_pool, token_to_kv_pool_allocator=allocator,
                memory_pool_config=target_worker.model_runner.memory_pool_config,
            )
            # Reads the pool it was just given, as SGLang's own TpModelWorker-based drafts do.
            self.window = min(self.max_total_num_tokens, 4096)

        def clear_cache_pool(self):
            pass

    return {WORKER}


def register():
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo, get_spec

    if get_spec(ALGORITHM) is not None:
        return
    worker_class = _worker_class()

    class TinyCustomSpec(CustomSpecAlgo):
        def create_future_map(self, device, req_to_token_pool, needs_cpu_seq_lens=True):
            from sglang.srt.managers.overlap_utils import FutureMap

            return FutureMap(device, self, req_to_token_pool, needs_cpu_seq_lens)

    @SpeculativeAlgorithm.register(ALGORITHM, spec_class=TinyCustomSpec)
    def _factory(server_args):
        return worker_class
'''


@pytest.mark.cpu_engine
def test_custom_algorithm_is_built_the_stock_way_with_one_warning(tmp_path: Path) -> None:
    # A module and a ``.dist-info`` declaring it as an ``sglang.srt.plugins`` entry point.
    plugin_dir = tmp_path / "plugin-dist"
    dist_info = plugin_dir / f"{PLUGIN_MODULE}-0.1.dist-info"
    dist_info.mkdir(parents=True)
    (plugin_dir / f"{PLUGIN_MODULE}.py").write_text(PLUGIN_SOURCE)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: specinit-test-custom-spec\nVersion: 0.1\n"
    )
    (dist_info / "entry_points.txt").write_text(
        f"[sglang.srt.plugins]\n{PLUGIN_NAME} = {PLUGIN_MODULE}:register\n"
    )
    python_path = [str(SITE_DIR), str(plugin_dir), *filter(None, [os.environ.get("PYTHONPATH")])]
    run = start_engine(
        llama_family.tiny_llama_target(),
        draft=llama_family.tiny_standalone_draft(),
        algorithm=ALGORITHM,
        plugin=True,
        work_dir=tmp_path / "engine",
        extra_env={
            "PYTHONPATH": os.pathsep.join(python_path),
            "SGLANG_PLUGINS": f"{PLUGIN_ENTRY_POINT},{PLUGIN_NAME}",
        },
        disable_overlap_schedule=True,  # not registered with supports_overlap
    )
    report = run.report
    assert report["specinit_loaded"]
    assert report["scheduler"]["spec_algorithm"] == ALGORITHM
    warnings = [line for line in run.log.splitlines() if STOCK_WARNING in line]
    assert len(warnings) == 1, warnings
    assert f"{WORKER} (a custom speculative worker)" in warnings[0]
    assert "[specinit] phase" not in run.log
    assert run.breakdown is None  # no phased init, no memory-rank*.json

    target, draft = runner(report, "target"), runner(report, "draft")
    # The worker's constructor ran whole (it read its pool size), on the target's allocator.
    assert draft["token_to_kv_pool_allocator_id"] == target["token_to_kv_pool_allocator_id"]
    assert draft["kv_pool"]["size"] == target["kv_pool"]["size"] > 0
    # And, as the warning says, its memory is not budgeted: the target pool was sized alone.
    weights = target["weight_bytes"] + draft["weight_bytes"]
    pools = kv_buffer_bytes(target["kv_pool"]) + kv_buffer_bytes(draft["kv_pool"])
    assert weights + pools > MIN_STOCK_OVERSHOOT * F * CAPACITY
