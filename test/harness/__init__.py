"""Test harness for sglang-specinit; importing it or a sub-package is cheap (no torch or sglang)."""
