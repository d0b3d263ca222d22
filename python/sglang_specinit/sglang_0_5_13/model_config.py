"""A draft's model config gets its own copy of the cached hf config, which
``_config_draft_model`` rewrites in place (phased: before the target's pool is sized)."""

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
