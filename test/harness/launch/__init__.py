"""Starting SGLang for tests and owning its processes, on CPU (and, shared, on a GPU runner).

- ``engine``: ``sglang.Engine`` and CPU ``launch_server`` helpers (what a CPU run needs);
- ``engine_driver``: the child process that owns one ``sglang.Engine`` (``python -m``);
- ``server_process``: one ``python -m sglang.launch_server`` process tree, CPU and GPU suite;
- ``processes``: ports, process groups, logs, shared with the GPU suite;
- ``sglang_release``: which sglang release this process runs, and what its CPU run needs;
- ``multi_rank``: launches expected to end on their own: bounded, and what they left behind;
- ``tp2_pair``: the tiny TP 2 pair every generation suite launches, and each rank's own meter
  arithmetic and plan;
- ``launch_0_5_23``: the 0.5.23 suite's tiny speculative launches and what they left;
- ``release_suite``: what the generation suites share (CPU import recipe, EAGLE3 launch
  fixture, the budget-fill and plan-equals-server checks);
- ``plugin_probe``: a fresh interpreter that runs ``load_plugins()`` and reports what it saw;
- ``forward_hooks``: the ``--forward-hooks`` factory the phased launches name (the scheduler
  report lists the modules it hooked);
- ``started_launches``: the launches this test process brought up with the plugin on (the live
  side of the plan-vs-live table);
- ``site/sitecustomize.py``: installs the harness's hooks in every Python process of a run
  (the spawned schedulers inherit only the environment); ``server_process.SITE_DIR``.
"""
