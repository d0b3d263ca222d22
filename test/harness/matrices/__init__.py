"""Rows of the suite's launch matrices, and the probes that run them.

- ``fidelity``: the recipe-fidelity matrix's rows (SGLang's documented speculative recipes);
- ``fidelity_probe``: builds each launch's ``ServerArgs`` and model configs, plugin on and off;
- ``step_aside``: a stock-sized 0.5.23 launch's pools, for the step-aside matrix;
- ``dsv4_flash``: the DeepSeek-V4-Flash layout cells priced on 0.5.23's configurators;
- ``plan_verdicts``: the fault matrices' rows (refused, and their messages; starting) and
  ``plan`` on the live rows' launches (planner-is-the-verdict tests).
"""
