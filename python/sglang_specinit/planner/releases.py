"""Which release's logic the planner runs and prints, found through the adapter registry.

The planner runs SGLang's server-args logic, so it plans with the release installed next to it,
and only for a release the plugin serves: :func:`sglang_specinit.compat.decide_for_version`
names the adapter package, and each adapter package has one server-args replay, its
``planner_replay.REPLAY`` (:class:`sglang_specinit.planner.replay.ServerArgsReplay`). No module
here names a release: what a replay can print beside this package's plan
(``--sglang-version``) is the replay's ``printable_releases``, and a rule printed as a stock
column of its own is the serving adapter's ``planner_replay.stock_beside``.
"""

from __future__ import annotations

from typing import Any

from sglang_specinit import compat
from sglang_specinit.planner.inputs import PlanError
from sglang_specinit.planner.replay import ServerArgsReplay


def sglang_releases() -> tuple[str, ...]:
    """Every release some adapter serves (``--sglang-version``'s choices; the installed
    replay then says which of them it can print: :func:`release_to_print`)."""
    return tuple(compat.supported_releases())


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


def release_to_print(requested: str | None, replay: ServerArgsReplay) -> str:
    """The rule to print beside this package's: ``--sglang-version``, else the replay's own."""
    release = requested or replay.release
    printable = replay.printable_releases
    if release not in printable:
        raise PlanError(
            f"--sglang-version {release} needs sglang {release}'s server-args logic; this "
            f"environment has sglang {compat.installed_sglang_version()} (allowed here: "
            f"{', '.join(printable)})"
        )
    return release


def stock_beside(plan: Any, release: str) -> Any:
    """``release``'s stock column beside this package's (a
    :class:`~sglang_specinit.planner.columns.StockBeside`), where the adapter serving it prints
    one; None: the plan's own columns are printed."""
    module = compat.adapter_module_for_release(release, "planner_replay")
    build = getattr(module, "stock_beside", None)
    return None if build is None else build(plan)


def modelled_rule(release: str) -> Any:
    """``release``'s stock sizing modelled on the budget inputs: the serving adapter's
    ``stock_rule.stock_plan``."""
    return compat.adapter_module_for_release(release, "stock_rule").stock_plan
