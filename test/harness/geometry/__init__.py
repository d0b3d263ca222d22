"""Geometric KV pricing, kept only as a cross-check of the pools SGLang's own pool code builds.

- ``kv_specs``: the spec classes (full-attention, hybrid-SWA), a draft pool sized by the target;
- ``specs``: a 0.5.13.x ``ModelConfig`` or live runner -> its geometric KV specs.
"""
