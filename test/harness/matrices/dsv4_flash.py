"""DeepSeek-V4-Flash + MTP cells on sglang 0.5.23's own configurators, without weights."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from harness.checkpoints.published_configs import EXAMPLES

GIB = 1 << 30
# V4-Flash, bytes (estimates from the config: 256 experts x 3 x 4096 x 2048 per layer).
EXPERTS_FP4_PER_LAYER = 3_422_552_064  # e2m1 + one e8m0 scale per 32 values
EXPERTS_FP8_PER_LAYER = 6_442_450_944 + 6_442_450_944 // (128 * 128) * 4
CHECKPOINT_FP4 = 159_900_000_000  # FP4 experts, FP8 attention/dense, one MTP block
MTP_BLOCK = 3_520_000_000  # one decoder layer's worth
VOCAB_TABLE = 129_280 * 4096 * 2  # the NextN draft's own embed / lm_head (bf16), each
MTP_FLAGS = {
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}


@dataclass(frozen=True)
class Cell:
    name: str
    tp: int
    fp8_experts: bool
    device_gib: float
    capability: tuple[int, int]
    swa_ratio: float | None = None
    mem_fraction_static: float = 0.85
    tags: tuple[str, ...] = ()

    def weights(self) -> tuple[int, int, int]:
        """(target, draft's own, draft duplicates of the target) bytes per rank."""
        target = CHECKPOINT_FP4 - MTP_BLOCK
        draft = MTP_BLOCK
        if self.fp8_experts:
            extra = EXPERTS_FP8_PER_LAYER - EXPERTS_FP4_PER_LAYER
            target += 43 * extra
            draft += extra
        return target // self.tp, draft // self.tp, 2 * VOCAB_TABLE // self.tp


CELLS = [
    Cell("V4-Flash MTP, H200 FP8, TP 4", 4, True, 140.0, (9, 0), tags=("h200-tp4",)),
    Cell("V4-Flash MTP, H200 FP8, TP 8", 8, True, 140.0, (9, 0)),
    Cell("V4-Flash MTP, H200 FP4, TP 4", 4, False, 140.0, (9, 0)),
    Cell("V4-Flash MTP, B200 FP4, TP 4, ratio 0.1", 4, False, 178.0, (10, 0), 0.1),
    Cell("V4-Flash MTP, B200 FP4, TP 8, ratio 0.1", 8, False, 178.0, (10, 0), 0.1),
    Cell("V4-Flash MTP, B200 FP4, TP 4, ratio 0.2", 4, False, 178.0, (10, 0), 0.2),
]


def publish(cell: Cell, scratch: Path, **extra_args: Any) -> Any:
    """``cell``'s launch published as 0.5.23 publishes it on its GPU (compute capability
    answered as the cell's: 0.5.23's V4 defaults read it); ``extra_args`` are more
    ``ServerArgs`` fields (``scratch``: unused, the config is the shipped example's)."""
    from sglang_specinit.sglang_0_5_23.offline_configurator import published_layout

    args = dict(
        MTP_FLAGS,
        # Its published hyperparameters (43 layers: two SWA-only, then c4 / c128 alternating; one
        # MTP layer; FP8 attention and dense weights, FP4 routed experts).
        model_path=str(EXAMPLES / "deepseek-v4-flash-mtp" / "target"),
        tp_size=cell.tp,
        mem_fraction_static=cell.mem_fraction_static,
        **extra_args,
    )
    if cell.swa_ratio is not None:
        args["swa_full_tokens_ratio"] = cell.swa_ratio
    with mock.patch("torch.cuda.get_device_capability", return_value=cell.capability):
        return published_layout(trust_remote_code=True, **args)
