"""Which sglang release the planner replays: the installed one, by the runtime's own decision.

The planner runs SGLang's server-args logic, so it plans with the release installed next to it,
and only for a release the plugin serves: :func:`sglang_specinit.compat.decide_for_version`
names the adapter package, and each adapter package has one server-args replay
(:class:`sglang_specinit.planner.replay.ServerArgsReplay`). ``--sglang-version`` then picks which
release's rule is printed beside this package's plan; the 0.5.13.x replay can print 0.5.23's
rule too, the 0.5.23 replay has no 0.5.13.post1 logic to run.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from sglang_specinit.planner.inputs import PlanError
from sglang_specinit.planner.replay import ServerArgsReplay
from sglang_specinit.planner.replay_0_5_13 import REPLAY_0_5_13
from sglang_specinit.sglang_0_5_23 import RELEASES as _RELEASES_0_5_23

DEFAULT_RELEASE = "0.5.13.post1"
# Rules the planner can print beside its own (``--sglang-version``): 0.5.13.post1's, and each
# release of 0.5.23's generation (its own configurator, in its own environment).
SGLANG_RELEASES = (DEFAULT_RELEASE, *_RELEASES_0_5_23)
# The 0.5.13.x replay also prints 0.5.23's rule, modelled (it reads the same config.json fields).
_PRINTABLE_0_5_13 = (DEFAULT_RELEASE, "0.5.23")


def printable_releases(replay: ServerArgsReplay) -> tuple[str, ...]:
    """The rules ``replay`` can print: the 0.5.13.x replay its own and 0.5.23's modelled rule;
    a replay of 0.5.23's generation only the installed release's own (``replay.release``)."""
    return _PRINTABLE_0_5_13 if replay.release == DEFAULT_RELEASE else (replay.release,)


def prints_generation_column(release: str) -> bool:
    """True when ``release``'s rule is printed as a 0.5.23-generation stock column
    (``release_0_5_23.plan_for_0_5_23``), false for the three-column report (0.5.13.post1's,
    and 0.5.14 / 0.5.15's, whose own rule is the report's "upstream 0.5.14" column)."""
    return release in _RELEASES_0_5_23


def installed_sglang() -> str | None:
    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def installed_replay() -> ServerArgsReplay:
    """The installed sglang's server-args replay; :class:`PlanError` for any other release."""
    from sglang_specinit.compat import decide_for_version, supported_releases

    installed = installed_sglang()
    decision = decide_for_version(installed)
    if decision.adapter == "sglang_0_5_13":
        return REPLAY_0_5_13
    if decision.adapter == "sglang_0_5_23":
        from sglang_specinit.planner.release_0_5_23 import REPLAY

        return REPLAY
    if decision.adapter == "sglang_0_5_14":
        from sglang_specinit.planner.release_0_5_14 import REPLAY as REPLAY_0_5_14

        return REPLAY_0_5_14
    served = ", ".join(supported_releases())
    what = f"sglang {installed} is installed" if installed else "sglang is not installed"
    raise PlanError(
        f"{what}; the planner runs the server-args logic of a served release ({served}): "
        "run it in that release's environment"
    )


def release_to_print(requested: str | None, replay: ServerArgsReplay) -> str:
    """The rule to print beside this package's: ``--sglang-version``, else the replay's own."""
    release = requested or replay.release
    printable = printable_releases(replay)
    if release not in printable:
        raise PlanError(
            f"--sglang-version {release} needs sglang {release}'s server-args logic; this "
            f"environment has sglang {installed_sglang()} (allowed here: {', '.join(printable)})"
        )
    return release
