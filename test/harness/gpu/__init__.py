"""The GPU suite's cases, checks and measurements (``test/gpu``, ``scripts/test-gpu.sh``); the
pure ones are also exercised on CPU.

- ``gpu_cases``: which servers the GPU suite launches: cases, model profiles, env overrides,
  the smoke's timeout;
- ``gpu_release``: the releases it runs on (0.5.13.post1, 0.5.23) and what differs between them;
- ``storage_identity``: whether the draft's embed/lm_head are the target's storage at pool time;
- ``case_report``: one case's launches, results and wall time, written as it goes;
- ``gpu_preflight``: can this machine run sglang's CUDA wheels (standard library only, run as
  ``python3 test/harness/gpu/gpu_preflight.py``);
- ``gpu_summary``: the GPU command's verdict from pytest's JUnit XML;
- ``gpu_verdict``: the verdicts, as pure functions of what two launches left behind;
- ``device_memory``: waiting until the last case's device memory is released;
- ``load``: filling a server's KV cache with concurrent requests, and what happened;
- ``spec_metrics``: accepted drafts, read from a ``/generate`` response;
- ``server_env``: one GPU server's argv and environment (never a CPU double), for the suite and
  its dry run;
- ``dry_run``: ``scripts/test-gpu.sh --dry-run``: every server the suite would start, parsed by
  the installed release's own ``ServerArgs`` and checked for CPU doubles;
- ``case_verdict``: every check of one case, in one function (the GPU test and CI run it);
- ``broken_plugins``: seven broken plugins as recorded case data, and which checks each fails;
- ``recorded_launch``: an EAGLE3 launch's capture lines and ``/server_info``, by the installed
  release's own code (the verdicts' CPU tests);
- ``memory_watch``: NVML peaks per device during init and capture, free memory after;
- ``live_results``: each test's outcome (JSON line, partial JUnit) written as it ends;
- ``time_budget``: each test's limit from its launches, the suite's and the job's;
- ``downloads``: ``hf download`` of only what the servers load.
"""
