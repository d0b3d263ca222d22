"""Model-geometry pricing, kept only as a cross-check of the pools the planner and the server
build (both price every pool by building it with the installed release's own pool code).

- ``kv_specs``: the spec classes (full-attention, hybrid-SWA), a draft pool sized by the target;
- ``specs``: 0.5.13.x ``ModelConfig`` or live runner -> geometric KV specs (what
  ``_init_pools`` would use), checked against a live runner's pool in test/sglang_0_5_13.
"""
