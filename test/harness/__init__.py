"""Test harness for sglang-specinit: tiny checkpoints, CPU shims, Engine/server runners.

Importing this package is cheap (no torch, no sglang); each module imports what it needs.

Shared by the CPU suite and the GPU suite: ``processes`` (ports, process groups, logs),
``server_process`` (one ``launch_server`` tree), ``device_probe`` (device memory read in the
scheduler around every KV pool), ``spec_metrics`` (accepted drafts in a response), ``load``
(KV-filling concurrent requests). GPU suite only: ``gpu_cases`` (cases and model profiles),
``device_memory`` (waiting until the last case's GPU memory is released), ``gpu_summary``
(the GPU command's verdict). CPU suite only: ``tiny_models`` (checkpoints), ``shims`` (CPU
test doubles + simulated device memory), ``scheduler_report`` (scheduler-side JSON reports),
``engine`` (Engine / CPU ``launch_server`` helpers), ``report_reading`` (reading those reports
and the plugin's memory breakdown), ``multi_rank`` (bounded launches that must end by
themselves, and what they left), ``faults`` (fault doubles: one rank's draft fails, phase 3
held mid-allocation).
"""
