"""sglang-specinit: the speculative draft priced into SGLang's KV-cache budget."""

__version__ = "0.1.0"
