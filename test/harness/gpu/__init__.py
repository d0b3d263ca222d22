"""The GPU suite's cases, checks and measurements (``test/gpu``, ``scripts/test-gpu.sh``); the
pure ones are also exercised on CPU. Each module's docstring says what it holds."""
