"""Tiny HF checkpoints and config-only models for the CPU tests, generated locally from a seed
(no hub access, a few MiB each) and cached under ``<repo>/.cache/tiny-models``.

- ``llama_layout``: what every writer shares: the cache, the vocabulary and tokenizer, the Llama
  shape, config and decoder-layer tensors, saving a checkpoint;
- ``llama_family``: the default Llama target, its STANDALONE draft, the Qwen2 target and draft;
- ``eagle_drafts``: drafts reading the Llama target's hidden states: EAGLE, EAGLE3, DFLASH;
- ``mimo_v2_mtp``: a MiMo-V2 target carrying its MTP layers (multi-layer EAGLE);
- ``gemma4_mtp``: a Gemma 4 target and its assistant (frozen-KV MTP draft);
- ``tiny_configs``: one config-only model per architecture of SGLang's documented recipes,
  weighted checkpoints of those an Engine starts, a dense DeepSeek-V2 MLA target;
- ``published_configs``: published model configs (no weights) for tests that price pools.
"""
