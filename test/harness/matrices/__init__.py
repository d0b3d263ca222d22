"""Rows of the suite's launch matrices, and the probes that run them.

- ``fidelity``: the recipe-fidelity matrix's rows (SGLang's documented speculative recipes,
  flag for flag, as 0.5.13.post1 and 0.5.23 take them) and per-row machinery;
- ``fidelity_probe``: builds each launch's ``ServerArgs`` and model configs as the installed
  SGLang does, plugin on and off (``python -m``);
- ``step_aside``: builds a stock-sized launch's target and draft pools as 0.5.23 does (the
  draft on the target's request pool and allocator), for the step-aside matrix;
- ``dsv4_flash``: the DeepSeek-V4-Flash layout cells (cookbook launches on H200 / B200) the V4
  matrix, the hook test and the planner test price on 0.5.23's configurators;
- ``refused_launches``: the fault matrices' refused-launch rows (0.5.13.post1 and 0.5.23): each
  row's bad draft or flags and the one-line message it must get;
- ``plan_verdicts``: ``plan`` run on the same launches as the live rows (the fault matrices'
  refused rows, plus launches that start), for the planner-is-the-launch's-verdict tests.
"""
