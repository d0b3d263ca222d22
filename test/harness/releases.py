"""Every served sglang release, one row each: its adapter, venv, suite files and the expectations
that differ between releases (the tests' own, read from each release's source, never the product's).

    python test/harness/releases.py ci 0.5.22      # venv, "venv" or "sibling", paths
    python test/harness/releases.py queue          # the releases scripts/test.sh's CI queue runs
    python test/harness/releases.py names          # every served release (plan_snapshot.sh)
    python test/harness/releases.py rows           # the table
"""

from __future__ import annotations

import fnmatch
import os
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

SHARED = "shared"


@dataclass(frozen=True)
class Release:
    """One served release. ``files`` / ``exclude`` are globs over its suite's test files."""

    name: str
    adapter: str
    venv: str
    # True: the release's wheel unpacked over ``venv`` (scripts/sibling_release.sh).
    sibling: bool = False
    files: tuple[str, ...] = ("test_*.py",)
    exclude: tuple[str, ...] = ()
    # Files whose tests are ``slow`` on this release (another release runs them in CI).
    slow: tuple[str, ...] = ()
    # Runs ``test/shared`` (the merged 0.5.13 / 0.5.23 checks) on this release.
    shared: bool = False
    # Its test processes import SGLang with the CPU recipe (suite_gate);
    # 0.5.13's CPU harness patches device cpu in itself (harness.cpu_doubles.shims).
    cpu_import_recipe: bool = True
    # --- what differs inside the sglang_0_5_23 generation (0.5.16 - 0.5.23)
    # The configurator holds a ParallelState ``ps`` (0.5.16 - 0.5.20).
    parallel_state: bool = False
    # ServerArgs is still 0.5.15's dataclass, resolved in __post_init__ (0.5.16 - 0.5.18).
    dataclass_server_args: bool = False
    # runtime_context publishes get_schedule / get_model / get_spec (0.5.17 on).
    config_bags: bool = True
    # The attention widths are computed at publish (0.5.20 on).
    widths_at_publish: bool = True
    # The profile reserves memory for a multimodal runtime (0.5.18 on).
    mm_reservation: bool = True
    # ``ModelRunner.init_kv_cache_configurator(draft_parallel_layout)`` (0.5.23).
    draft_parallel_layout: bool = False
    # Fused draft entries, --enable-kv-cache-sharding, attention-DP names (0.5.22 on).
    fused_entries: bool = True
    # Platform facts ``override_platform`` refuses (0.5.21: is_mps, is_sm110); None: unchecked.
    platform_facts_lacking: tuple[str, ...] | None = ()
    # True: scripts/test.sh's queue runs this row's CI line (two at a time); False: run before
    # the queue (0.5.13.post1's and 0.5.23's suites) or not in CI (0.5.13: 0.5.13.post1 covers it).
    ci_queue: bool = False

    @property
    def label(self) -> str:
        """``stock_0_5_21``'s release part."""
        return self.name.replace(".", "_")

    def paths(self) -> list[str]:
        """The test paths of this release's CI line."""
        return [f"test/{self.adapter}", *([f"test/{SHARED}"] if self.shared else [])]

    def slow_file(self, path: Path) -> bool:
        return path.parent.name == self.adapter and any(
            fnmatch.fnmatch(path.name, g) for g in self.slow
        )

    def runs(self, file_name: str) -> bool:
        return any(fnmatch.fnmatch(file_name, g) for g in self.files) and not any(
            fnmatch.fnmatch(file_name, g) for g in self.exclude
        )


_0515 = dict(
    adapter="sglang_0_5_14",
    venv=".venv-sglang0515",
    exclude=("test_eagle3_launch.py",),
    ci_queue=True,
)
_PARALLEL_STATE = dict(
    adapter="sglang_0_5_23",
    venv=".venv-sglang0520",
    sibling=True,
    files=("test_adapter_signatures.py", "test_planner_parallel_state.py"),
    parallel_state=True,
    fused_entries=False,
    platform_facts_lacking=None,
    widths_at_publish=False,
    ci_queue=True,
)
# The 0.5.16 - 0.5.20 rows' own files; 0.5.23 runs the rest (they are its suite).
_PARALLEL_STATE_ONLY = ("test_planner_parallel_state.py", "test_server_args_stock.py")
# 0.5.23 runs plan == server in this environment in test/shared/test_plan_matches_server.py.
_SIBLING_GENERATION_ONLY = ("test_eagle3_launch.py",)
# 0.5.20, in a venv of its own, also launches the EAGLE3 pair and reads stock ServerArgs.
_0520 = {**_PARALLEL_STATE, "sibling": False, "widths_at_publish": True}
_0520["files"] += ("test_eagle3_launch.py", "test_server_args_stock.py")

RELEASES: tuple[Release, ...] = (
    Release("0.5.13", "sglang_0_5_13", ".venv", sibling=True, shared=True, cpu_import_recipe=False),
    Release("0.5.13.post1", "sglang_0_5_13", ".venv", shared=True, cpu_import_recipe=False),
    Release("0.5.14", "sglang_0_5_14", ".venv-sglang0514", ci_queue=True),
    # 0.5.15's Engines are 0.5.14's code path (test_eagle3_launch on 0.5.14 covers them).
    Release("0.5.15", **_0515),
    Release("0.5.15.post1", **_0515, sibling=True),
    Release(
        "0.5.16",
        **_PARALLEL_STATE,
        dataclass_server_args=True,
        config_bags=False,
        mm_reservation=False,
    ),
    Release("0.5.17", **_PARALLEL_STATE, dataclass_server_args=True, mm_reservation=False),
    Release("0.5.18", **_PARALLEL_STATE, dataclass_server_args=True),
    Release("0.5.19", **_PARALLEL_STATE),
    Release("0.5.20", **_0520),
    Release(
        "0.5.21",
        "sglang_0_5_23",
        ".venv-sglang0521",
        files=("test_adapter_signatures.py", "test_eagle3_launch.py"),
        # CI launches the same EAGLE3 pair on 0.5.22, the next release of this generation.
        slow=("test_eagle3_launch.py",),
        fused_entries=False,
        platform_facts_lacking=("is_mps", "is_sm110"),
        ci_queue=True,
    ),
    Release(
        "0.5.22",
        "sglang_0_5_23",
        ".venv-sglang0522",
        files=("test_adapter_signatures.py", "test_eagle3_launch.py"),
        ci_queue=True,
    ),
    Release(
        "0.5.23",
        "sglang_0_5_23",
        ".venv-sglang0523",
        exclude=_PARALLEL_STATE_ONLY + _SIBLING_GENERATION_ONLY,
        shared=True,
        draft_parallel_layout=True,
    ),
)

BY_NAME = {r.name: r for r in RELEASES}
# Every served release, oldest first: the tests' expectation, never read from the product.
SERVED = tuple(BY_NAME)


def installed_name() -> str | None:
    """The installed sglang's version string (``"0.5.15.post1"``); None when absent."""
    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def installed_row() -> Release | None:
    """The installed release's row; None when sglang is absent or the release is not served."""
    return BY_NAME.get(installed_name() or "")


def suite_gate(folder: Path) -> tuple[list[str], Release | None]:
    """``collect_ignore_glob`` for the suite ``folder`` (a generation's, or ``test/shared``): every
    file unless the installed row runs the suite, else the files it does not run; and that row.
    A suite that runs gets what SGLang on cpu needs at import (``cpu_import_recipe``)."""
    row = installed_row()
    name = folder.name
    runs = row is not None and (row.adapter == name or (name == SHARED and row.shared))
    if not runs:
        return ["test_*.py"], None
    assert row is not None
    if row.cpu_import_recipe:
        from harness.launch.sglang_release import extra_python_path

        # Before SGLang is imported on cpu: the CPU engine switch, the release's sgl_kernel double.
        os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
        sys.path.extend(p for p in extra_python_path() if p not in sys.path)
    ignored = [] if name == SHARED else [
        p.name for p in sorted(folder.glob("test_*.py")) if not row.runs(p.name)
    ]  # fmt: skip
    return ignored, row


# The ``slow`` set (a CPU launch costs SGLang's imports twice, ~40 s on 2 cores; CI must stay
# inside 30 minutes) runs only with SPECINIT_TEST_SLOW=1. Each slow test says what covers it in CI.
SLOW_ENV = "SPECINIT_TEST_SLOW"


def _main(argv: list[str]) -> int:
    if argv[:1] == ["ci"] and len(argv) == 2:  # scripts/test.sh's `release NAME`
        row = BY_NAME[argv[1]]
        print(row.venv, "sibling" if row.sibling else "venv", *row.paths())
        return 0
    if argv == ["queue"]:  # scripts/test.sh's queue: own venvs (Engine launches) first, longest
        queued = [r for r in RELEASES if r.ci_queue]
        print(" ".join(r.name for r in sorted(queued, key=lambda r: r.sibling)))
        return 0
    if argv == ["names"]:
        print(" ".join(r.name for r in RELEASES))
        return 0
    if argv == ["rows"]:
        for r in RELEASES:
            venv = f"{r.venv} (sibling wheel)" if r.sibling else r.venv
            files = " ".join(r.files) + "".join(f" -{g}" for g in r.exclude)
            print(f"{r.name:<13} {r.adapter:<14} {venv:<33} {' '.join(r.paths())}: {files}")
        return 0
    usage = [ln.strip() for ln in __doc__.splitlines() if ln.strip().startswith("python ")]
    print("usage:", *usage, sep="\n  ", file=sys.stderr)
    return 2


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    raise SystemExit(_main(sys.argv[1:]))
