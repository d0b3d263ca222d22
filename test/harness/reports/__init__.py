"""What SGLang's scheduler process saw at init, written from inside it, and reading it back.

- ``scheduler_report``: the scheduler-side JSON reports (pools, runners, meter readings);
- ``report_reading``: reading those reports and the plugin's memory breakdown;
- ``live_reports``: keeping a run's live memory reports for CI's artifact;
- ``device_probe``: device memory around every KV pool, by SGLang's own meter;
- ``fidelity_tensors``: every model tensor and KV-pool buffer, for the fidelity matrix;
- ``config_snapshot``: a comparable snapshot of a ``ModelConfig``.
"""
