"""Which release's logic the planner runs: the installed one's, if the plugin serves it, found
through :func:`sglang_specinit.compat.decide_for_version` (others: ``report --beside VENV``)."""

from __future__ import annotations

from sglang_specinit import compat
from sglang_specinit.planner.inputs import PlanError
from sglang_specinit.planner.replay import ServerArgsReplay


def installed_replay() -> ServerArgsReplay:
    """The installed sglang's server-args replay; :class:`PlanError` for any other release."""
    installed = compat.installed_sglang_version()
    decision = compat.decide_for_version(installed)
    if decision.generation is not None:
        return decision.generation.replay()
    served = ", ".join(compat.supported_releases())
    what = f"sglang {installed} is installed" if installed else "sglang is not installed"
    raise PlanError(
        f"{what}; the planner runs the server-args logic of a served release ({served}): "
        "run it in that release's environment"
    )


def check_requested_release(requested: str | None, replay: ServerArgsReplay) -> None:
    """``--sglang-version``: only the installed release, whose own code the plan runs."""
    if requested is not None and requested != replay.release:
        raise PlanError(
            f"--sglang-version {requested}: this environment runs sglang {replay.release}, and "
            f"the plan is that release's own code; plan in sglang {requested}'s environment, "
            "or put it beside this one with report --beside VENV"
        )
