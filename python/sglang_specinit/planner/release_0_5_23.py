"""The offline plan seen against sglang 0.5.23 (``plan --sglang-version 0.5.23``).

0.5.23 has upstream's phased init, so its column is one rule, ``budget.upstream_0_5_23_plan``
(reproduced against the real 0.5.23 init in ``test/sglang_0_5_23``), beside this package's
``budget.plan_pools`` on the very same inputs: the same flags, the same fraction, the same
weights. What differs from the 0.5.13.post1 report:

* there is no flat 4/6 GiB speculative reserve in 0.5.23's automatic fraction, so both columns
  run with the fraction the planner derives without it (pass ``--mem-fraction-static`` to match
  a server exactly);
* 0.5.23 reserves ``d`` draft layers of the target's geometry, where ``d`` is the draft's
  ``num_nextn_predict_layers`` (an explicit 0 reserves nothing), else its layer count, and for a
  path-less MTP draft the target's ``num_nextn_predict_layers`` (0.5.20+);
* the draft's duplicate embed/lm_head are resident when 0.5.23 profiles.

The planner still reads flags and model geometry through the installed SGLang (0.5.13.post1 in
``.venv``): both releases read the same ``config.json`` fields for these models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from sglang_specinit.budget import upstream_0_5_23_plan
from sglang_specinit.planner.plan import OfflinePlan, plan_json
from sglang_specinit.report import ReportColumn

SGLANG_RELEASES = ("0.5.13.post1", "0.5.23")
DEFAULT_RELEASE = "0.5.13.post1"


def default_release() -> str:
    """The installed sglang if the planner knows its rule, else 0.5.13.post1."""
    try:
        installed = version("sglang")
    except PackageNotFoundError:
        return DEFAULT_RELEASE
    if installed in SGLANG_RELEASES:
        return installed
    return "0.5.13.post1" if installed.startswith("0.5.13") else DEFAULT_RELEASE


@dataclass(frozen=True)
class Plan0523:
    """Stock 0.5.23's column beside this package's, for one offline plan."""

    base: OfflinePlan
    stock: ReportColumn

    @property
    def columns(self) -> tuple[ReportColumn, ReportColumn]:
        return (self.stock, self.base.ours)


def reserved_layers_0_5_23(plan: OfflinePlan) -> int:
    """The ``d`` 0.5.23 reserves for this plan's draft (``spec_aux_hidden_state``)."""
    draft = plan.ours.inputs.draft
    if draft is None:
        return 0
    path_less = plan.draft_model_path is None or plan.draft_model_path == plan.model_path
    if path_less and draft.algorithm != "DFLASH":
        config = json.loads((Path(plan.model_path) / "config.json").read_text())
        text_config = config.get("text_config") or {}
        nextn = config.get("num_nextn_predict_layers", text_config.get("num_nextn_predict_layers"))
        return int(nextn or 0)
    return draft.upstream_reserved_layers


def plan_for_0_5_23(plan: OfflinePlan) -> Plan0523:
    inputs = plan.ours.inputs
    if inputs.draft is not None:
        draft = replace(inputs.draft, upstream_reserved_layers=reserved_layers_0_5_23(plan))
        inputs = replace(inputs, draft=draft)
    # 0.5.23's rule works from what its own profile sees, never from a measured value of a
    # plugin run (that one has no duplicates resident).
    stock_inputs = replace(inputs, measured_resident_bytes=None)
    stock = ReportColumn("stock 0.5.23", upstream_0_5_23_plan(stock_inputs), stock_inputs)
    return Plan0523(base=plan, stock=stock)


def plan_json_0_5_23(plan: Plan0523) -> dict[str, Any]:
    """``--json``: this package's plan at top level, stock 0.5.23 as ``stock_0_5_23``."""
    data = plan_json(plan.base)
    data.pop("stock_0_5_13", None)
    data.pop("upstream_0_5_14", None)
    data["stock_0_5_23"] = plan.stock.to_dict(plan.base.tp_size)
    data["sglang_version"] = "0.5.23"
    return data
