"""Which sglang release the planner replays: the installed one, by the runtime's own decision.

The planner runs SGLang's server-args logic, so it plans with the release installed next to it,
and only for a release the plugin serves: :func:`sglang_specinit.compat.decide_for_version`
names the adapter package, and each adapter package has one server-args replay
(:class:`sglang_specinit.planner.plan.ServerArgsReplay`). ``--sglang-version`` then picks which
release's rule is printed beside this package's plan; the 0.5.13.x replay can print 0.5.23's
rule too, the 0.5.23 replay has no 0.5.13.post1 logic to run.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from sglang_specinit.planner.plan import REPLAY_0_5_13, PlanError, ServerArgsReplay

# Rules the planner can print beside its own (``--sglang-version``).
SGLANG_RELEASES = ("0.5.13.post1", "0.5.23")
DEFAULT_RELEASE = "0.5.13.post1"
# Rules each replay can print: 0.5.13.x's reads the same config.json fields 0.5.23 does.
_PRINTABLE = {"0.5.13.post1": SGLANG_RELEASES, "0.5.23": ("0.5.23",)}


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
    served = ", ".join(supported_releases())
    what = f"sglang {installed} is installed" if installed else "sglang is not installed"
    raise PlanError(
        f"{what}; the planner runs the server-args logic of a served release ({served}): "
        "run it in that release's environment"
    )


def release_to_print(requested: str | None, replay: ServerArgsReplay) -> str:
    """The rule to print beside this package's: ``--sglang-version``, else the replay's own."""
    release = requested or replay.release
    printable = _PRINTABLE[replay.release]
    if release not in printable:
        raise PlanError(
            f"--sglang-version {release} needs sglang {release}'s server-args logic; this "
            f"environment has sglang {installed_sglang()} (allowed here: {', '.join(printable)})"
        )
    return release
