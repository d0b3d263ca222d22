"""Model-geometry pricing, kept only as a cross-check of the pools the planner and the server
build (both price every pool by building it with the installed release's own pool code).

- ``kv_specs``: the geometric spec classes (full-attention, hybrid-SWA) and a draft pool sized
  by the target's config;
- ``specs``: sglang 0.5.13.x ``ModelConfig`` -> the budget model's geometric KV specs (the
  widths, layer counts and dtypes ``_init_pools`` would use), and the draft's extra bytes;
- ``runner_kv_spec``: a live 0.5.13.x runner's geometric KV spec, checked against its built
  pool in ``test/sglang_0_5_13``.
"""
