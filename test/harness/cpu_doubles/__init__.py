"""Test doubles for what a GPU-less machine lacks; never installed on a GPU run.

- ``shims``: SGLang's speculative init on cpu, and a deterministic simulated device memory;
- ``faults``: fault injection (one rank's draft fails, phase 3 held mid-allocation);
- ``unloaded_runner``: a ModelRunner without weights, to price published configs' pools;
- ``sgl_kernel_stub/``: 0.5.16+'s ``sgl_kernel`` on cpu (a PYTHONPATH entry).
"""
