"""Test doubles for what a GPU-less machine lacks (never installed on a GPU run): ``shims``
(SGLang's speculative init on cpu, a simulated device memory), ``faults`` (fault injection),
``unloaded_runner`` (a ModelRunner without weights), ``sgl_kernel_stub/`` (0.5.16+'s
``sgl_kernel`` on cpu: ``harness.launch.sglang_release.SGL_KERNEL_STUB_DIR``)."""
