"""Model-geometry pricing, kept only as a cross-check of the pools the planner and the server
build (both price every pool by building it with the installed release's own pool code).

- ``kv_specs``: the spec classes (full-attention, hybrid-SWA), a draft pool sized by the target;
- ``specs``: 0.5.13.x ``ModelConfig`` -> geometric KV specs (what ``_init_pools`` would use);
- ``runner_kv_spec``: a live 0.5.13.x runner's spec, checked against its pool in test/sglang_0_5_13.
"""
