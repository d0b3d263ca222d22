"""Named test doubles for what a GPU-less test machine lacks; never installed on a GPU run.

- ``shims``: CPU-only doubles that let SGLang's speculative init run without a GPU, and the
  deterministic simulated device memory;
- ``faults``: fault-injection doubles: one rank's draft fails, phase 3 held mid-allocation;
- ``unloaded_runner``: a ``ModelRunner`` whose weights were never loaded, for pricing pools of
  published configs with SGLang's own code;
- ``sgl_kernel_stub/``: the ``sgl_kernel`` double 0.5.16+ imports on cpu (a ``PYTHONPATH``
  entry, ``harness.launch.sglang_release.SGL_KERNEL_STUB_DIR``).
"""
