"""The GPU suite's cases, checks and measurements (``test/gpu``, ``scripts/test-gpu.sh``); the
pure ones are also exercised on CPU.

- ``gpu_cases``: which servers the suite launches (cases, model profiles, env switches);
- ``gpu_release``: the releases it runs on and what differs between them for the suite;
- ``dry_run``: one GPU server's command and environment, and ``scripts/test-gpu.sh --dry-run``;
- ``gpu_preflight``: can this machine run the release's wheels at all;
- ``downloads``: the ``hf download`` commands for what the servers load;
- ``time_budget``: how long each GPU test and the workflow's job may take;
- ``gpu_verdict``: the verdicts, pure functions of what two launches left behind;
- ``gpu_summary``: a run's verdict from JUnit XML, per-test records, per-case reports;
- ``broken_plugins``: seven broken plugins as recorded case data, and the case they break;
- ``device_memory``: NVML readings, per-phase peaks through a server's start-up;
- ``load``: filling a server's KV cache with concurrent requests;
- ``storage_identity``: whether a draft's embed/lm_head are the target's storage at sizing.
"""
