"""Test harness for sglang-specinit: tiny checkpoints, CPU shims, Engine/server runners.

Importing this package is cheap (no torch, no sglang); each module imports what it needs.
Modules: ``tiny_models`` (checkpoints), ``shims`` (CPU test doubles + simulated device memory),
``scheduler_report`` (scheduler-side JSON reports), ``engine`` (Engine / launch_server helpers),
``report_reading`` (reading those reports and the plugin's memory breakdown).
"""
