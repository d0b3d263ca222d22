"""Per-area patches that turn SGLang 0.5.13.x's one-shot worker constructors into phases.

One module per SGLang area; each exposes ``HOOKS`` (targets wrapped through SGLang's
``HookRegistry``) and ``NEW_METHODS`` (phase methods added to classes that lack them).
"""
