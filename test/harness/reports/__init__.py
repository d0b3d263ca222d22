"""What SGLang's scheduler process saw at init, written from inside it, and reading it back.

- ``scheduler_report``: the scheduler-side JSON reports (pools, runners, meter readings);
- ``report_reading``: reading those reports and the plugin's memory breakdown (shared lookups
  and meter arithmetic for tests and benchmarks);
- ``live_reports``: keeping the plugin's live memory reports of a run for CI's artifact;
- ``device_probe``: device memory read with SGLang's own meter around every KV pool, the same
  for stock SGLang and the plugin (CPU and GPU suites);
- ``fidelity_tensors``: every model tensor and KV-pool buffer, for the fidelity matrix;
- ``config_snapshot``: a comparable snapshot of a ``ModelConfig`` across processes.
"""
