"""Rows of the suite's launch matrices, and the probes that run them.

- ``fidelity``: the recipe-fidelity matrix's rows (SGLang's documented speculative recipes);
- ``fidelity_probe``: builds each launch's ``ServerArgs`` and model configs, plugin on and off;
- ``plan_verdicts``: the fault matrices' rows (refused, and their messages; starting) and
  ``plan`` on the live rows' launches (planner-is-the-verdict tests).
"""
