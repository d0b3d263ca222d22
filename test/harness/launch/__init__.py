"""Starting SGLang for tests and owning its processes, on CPU (and, shared, on a GPU runner).

- ``engine``: ``sglang.Engine`` and CPU ``launch_server`` (bounded when it must end by itself),
  and the launches they brought up;
- ``engine_driver``: the child process that owns one ``sglang.Engine``;
- ``server_process``: one ``launch_server`` process tree, CPU and GPU suite;
- ``processes``: ports, process groups, logs;
- ``sglang_release``: which sglang release runs, and what its CPU run needs;
- ``tp2_pair``: the tiny TP 2 pair, each rank's meter arithmetic and plan;
- ``launch_0_5_23``: the 0.5.23 suite's tiny launches and what they left;
- ``release_suite``: what the generation suites share (fixtures, budget and plan checks);
- ``plugin_probe``: a fresh interpreter that runs ``load_plugins()`` and reports;
- ``forward_hooks``: the ``--forward-hooks`` factory the phased launches name;
- ``site/sitecustomize.py``: installs the harness's hooks in every process of a run.
"""
