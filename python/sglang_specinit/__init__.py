"""sglang-specinit: phased speculative-decoding init for SGLang 0.5.13 / 0.5.13.post1."""

__version__ = "0.1.0"
