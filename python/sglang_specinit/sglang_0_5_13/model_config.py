"""A draft's model config never touches the target's (sglang 0.5.13.x).

Wraps ``ModelConfig._config_draft_model`` (AROUND).

``get_config`` is cached, so a draft read from the target's own checkpoint (DeepSeek/GLM MTP,
path-less Qwen3-Next / MiMo-V2 MTP ...) receives the very ``PretrainedConfig`` object the
target's ``ModelConfig`` holds, and ``_config_draft_model`` rewrites it in place (architecture,
``num_nextn_predict_layers``). Stock builds the draft only after the target is complete; the
phased init builds it before the target's pool is sized, so during a phased init the draft
config gets its own copy first (as upstream 0.5.14 does for every config). Outside a phased
init this hook does nothing.
"""

from __future__ import annotations

from typing import Any

from sglang_specinit.model_facts import own_hf_config
from sglang_specinit.patch_table import PatchTable
from sglang_specinit.sglang_0_5_13.state import deferring_pools

MODULE = "sglang.srt.configs.model_config"
patch = PatchTable(MODULE)


@patch.around("ModelConfig._config_draft_model", params=())
@patch.calls("get_hf_text_config")  # own_hf_config derives the copy's text config with it
def config_draft_model(original: Any, self: Any) -> Any:
    if self.is_draft_model and deferring_pools():
        own_hf_config(self)
    return original(self)


HOOKS, NEW_METHODS, REQUIRES = patch.tables()
