"""Geometric KV pricing, kept only as a cross-check of the pools SGLang's own pool code builds."""
