"""Test harness for sglang-specinit: tiny checkpoints, CPU test doubles, SGLang launchers,
scheduler-side reports, the launch matrices' rows and the GPU suite's pieces.

Importing this package or any sub-package is cheap (no torch, no sglang); each module imports
what it needs when called. The index, by job (each sub-package's ``__init__`` says more):

``checkpoints`` - tiny HF checkpoints and config-only models, generated locally and cached:
    ``checkpoint_cache`` (cache keys, generator versions, atomic writes), ``checkpoint_kinds``
    (every kind by name), ``tiny_vocab`` (the shared tokenizer, special ids, exact prompts),
    ``llama_layout`` (shape, config and layer tensors the writers share), ``llama_family``
    (Llama target, STANDALONE draft, Qwen2), ``eagle_drafts`` (EAGLE, EAGLE3, DFLASH drafts),
    ``deepseek_mla`` (MLA target), ``mimo_v2_mtp`` (MiMo-V2 target with MTP layers),
    ``gemma4_mtp`` (Gemma 4 target and frozen-KV MTP assistant), ``tiny_configs`` (the recipe
    architectures, config-only or weighted), ``published_configs`` (published configs, no
    weights, for pricing pools).
``launch`` - starting SGLang and owning its processes: ``engine`` (Engine / CPU
    ``launch_server`` helpers), ``engine_driver`` (the child process that owns one Engine),
    ``server_process`` (one ``launch_server`` process tree, CPU and GPU), ``processes`` (ports,
    process groups, logs), ``sglang_release`` (which release runs, what its CPU run needs),
    ``multi_rank`` (bounded launches that must end by themselves, and what they left),
    ``tp2_pair`` (the tiny TP 2 pair every generation launches, each rank's own arithmetic),
    ``launch_0_5_23`` (the 0.5.23 suite's tiny speculative launches), ``release_suite`` (what
    the generation suites share: CPU import recipe, EAGLE3 fixture, shared checks),
    ``plugin_probe`` (a fresh interpreter running ``load_plugins()``, its summary read back),
    ``forward_hooks`` (the ``--forward-hooks`` factory the phased launches name); ``site/``
    (the ``sitecustomize`` that installs the harness's hooks in every spawned process).
``cpu_doubles`` - named test doubles for what a GPU-less machine lacks: ``shims`` (CPU shims
    and simulated device memory), ``faults`` (one rank's draft fails, phase 3 held
    mid-allocation), ``unloaded_runner`` (a ModelRunner without weights, for pricing pools);
    ``sgl_kernel_stub/`` (the ``sgl_kernel`` double for 0.5.16+ on cpu).
``reports`` - what the scheduler process saw, and reading it: ``scheduler_report`` (the
    scheduler-side JSON reports), ``report_reading`` (reading them and the plugin's memory
    breakdown), ``live_reports`` (keeping live memory reports for CI's artifact),
    ``device_probe`` (device memory read around every KV pool, CPU and GPU),
    ``fidelity_tensors`` (every model tensor and KV buffer), ``config_snapshot`` (a comparable
    snapshot of a ``ModelConfig``).
``matrices`` - rows of the launch matrices and the probes that run them: ``fidelity`` (the
    documented recipes, 0.5.13.post1), ``fidelity_0523`` (the same recipes on 0.5.23),
    ``dsv4_flash`` (the DeepSeek-V4-Flash layout cells), ``step_aside`` (a stock-sized
    launch's pools, for the step-aside matrix),
    ``fidelity_probe`` / ``fidelity_probe_0523`` (ServerArgs and model configs built as each
    release does, plugin on and off), ``refused_launches`` (the fault matrices' refused rows),
    ``plan_verdicts`` (``plan`` on the same launches, for the verdict tests).
``gpu`` - the GPU suite's cases, checks and measurements: ``gpu_cases`` (cases and model
    profiles), ``gpu_preflight`` (can this machine run the wheels), ``gpu_summary`` (the GPU
    command's verdict from JUnit XML), ``gpu_verdict`` (pure checks of two launches),
    ``device_memory`` (waiting until the last case's memory is released), ``load`` (KV-filling
    concurrent requests), ``spec_metrics`` (accepted drafts in a response), ``gpu_release``
    (the releases it runs on and what differs), ``storage_identity`` (the draft's embed/lm_head
    are the target's storage at pool time), ``case_report`` (one case's launches, results and
    wall time), ``server_env`` and ``dry_run`` (each server's argv and env, checked without a
    GPU), ``case_verdict`` and ``broken_plugins`` (a case's checks; seven broken plugins),
    ``memory_watch`` (NVML peaks), ``live_results`` (outcomes as tests end), ``time_budget``
    (test, suite and job limits), ``downloads`` (only what the servers load).
``geometry`` - model-geometry pricing kept only as a cross-check of built pools: ``kv_specs``
    (the geometric KV spec classes), ``specs`` (0.5.13.x ``ModelConfig`` -> geometric KV
    specs), ``runner_kv_spec`` (a live runner's).
``releases`` - every served release's row: its adapter, venv, generation suite, the files it
    runs and the expectations that differ; ``mutants`` - mutations of the product and the tests
    that must catch each (a CLI: caught / missed per mutation); ``selection`` - which tests a
    run selects (the ``slow`` set); ``code_size`` - the product's lines and prose share, one
    definition for the size test and for counting by hand.
"""
