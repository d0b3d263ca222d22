"""Test harness for sglang-specinit. Importing it or a sub-package is cheap (no torch, no sglang).
Each sub-package's ``__init__`` says what every module does; by job:

``checkpoints`` (tiny checkpoints and config-only models): ``llama_layout``, ``llama_family``,
    ``eagle_drafts``, ``mimo_v2_mtp``, ``gemma4_mtp``, ``tiny_configs``, ``published_configs``.
``launch`` (starting SGLang, owning its processes): ``engine``, ``engine_driver``,
    ``server_process``, ``processes``, ``sglang_release``, ``tp2_pair``,
    ``launch_0_5_23``, ``release_suite``, ``plugin_probe``, ``forward_hooks``,
    ``site/``.
``cpu_doubles`` (what a GPU-less machine lacks): ``shims``, ``faults``, ``unloaded_runner``,
    ``sgl_kernel_stub/``.
``reports`` (what the scheduler saw): ``scheduler_report``, ``report_reading``,
    ``live_reports``, ``device_probe``, ``fidelity_tensors``, ``config_snapshot``.
``matrices`` (launch matrices' rows and probes): ``fidelity``, ``fidelity_probe``,
    ``plan_verdicts``.
``gpu`` (the GPU suite): ``gpu_cases``, ``gpu_preflight``, ``gpu_summary``, ``gpu_verdict``,
    ``device_memory``, ``load``, ``gpu_release``, ``storage_identity``,
    ``dry_run``, ``broken_plugins``, ``time_budget``, ``downloads``.
``geometry`` (geometric pricing, a cross-check of built pools): ``kv_specs``, ``specs``.
Modules: ``releases`` (every served release's row; the ``slow`` set),
``hook_state`` (what SGLang's HookRegistry holds), ``planner_cli`` (the command line run in
this process).
"""
