"""``sglang-specinit`` command line: ``plan``, ``report`` and ``patches``. Launch flags go through
the installed SGLang's own parser; bad input is one line on stderr and exit 2."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

from sglang_specinit.patch_listing import patches_main
from sglang_specinit.planner.beside import Beside
from sglang_specinit.planner.columns import plan_json, plan_text
from sglang_specinit.planner.gpus import (
    CUDA_CONTEXT_ALLOWANCE_BYTES,
    DEFAULT_GPU,
    GIB,
    MIB,
    DeviceSpec,
    get_preset,
    parse_bytes,
    pre_load_free_bytes,
    presets_help,
)
from sglang_specinit.planner.inputs import (
    PlanError,
    RaisingParser,
    check_divisor_sizes,
    check_launch_values,
)
from sglang_specinit.planner.plan import OfflinePlan, build_plan
from sglang_specinit.planner.releases import check_requested_release, installed_replay
from sglang_specinit.planner.replay import CPU_ENGINE_ENV
from sglang_specinit.planner.shipped_examples import (
    DEFAULT_EXAMPLE,
    Example,
    example_refusal,
    list_examples,
    load_example,
)

EXIT_BAD_INPUT = 2


def _planner_parser() -> argparse.ArgumentParser:
    # allow_abbrev=False: "--device" (a launch_server flag) must not match "--device-memory".
    parser = RaisingParser(
        prog="sglang-specinit plan",
        allow_abbrev=False,
        description=(
            "Predict the KV pool of an SGLang speculative-decoding server, offline, with the "
            "installed SGLang's own server-args and sizing code: the installed release's stock "
            "sizing beside sglang-specinit's. Every flag not listed here is a launch_server flag "
            "(python -m sglang.launch_server --help); model and draft paths must be local "
            "directories."
        ),
    )
    helps = {
        "--gpu": f"device preset (default {DEFAULT_GPU}, or the example's). {presets_help()}",
        "--device-memory": "device total memory instead of a preset, e.g. 80GiB, 141GB, 24000MiB",
        "--pre-load-free-bytes": "free device memory before weights load (SGLang's 'Load weight "
        f"begin. avail mem' value); default: total minus {CUDA_CONTEXT_ALLOWANCE_BYTES // MIB} MiB",
        "--resident-bytes": "bytes resident when the pools are sized (target + draft weights after "
        "binding), e.g. resident_bytes from a server's SPECINIT_MEMORY line; replaces the "
        "checkpoint estimate in the sglang-specinit column",
        "--example": f"plan a shipped example (default {DEFAULT_EXAMPLE} when no --model-path is "
        f"given): {', '.join(list_examples())}",
        "--sglang-version": "refuse to plan unless this is the installed SGLang release",
    }
    for flag, text in helps.items():
        parser.add_argument(flag, help=text)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--verbose", action="store_true", help="keep SGLang's log output")
    return parser


def _launch_preview(launch: Sequence[str]) -> argparse.Namespace:
    """The few launch flags the cheap checks need, read without importing SGLang."""
    preview = RaisingParser(add_help=False, allow_abbrev=False)
    preview.add_argument("--model-path", "--model", dest="model_path")
    preview.add_argument("--speculative-draft-model-path", dest="draft_path")
    preview.add_argument("--speculative-algorithm", dest="algorithm")
    preview.add_argument("--mem-fraction-static", dest="mem_fraction_static", type=float)
    known, _ = preview.parse_known_args(list(launch))
    return known


def _device(options: argparse.Namespace, example: Example | None) -> DeviceSpec:
    if options.device_memory is not None:
        total = parse_bytes(options.device_memory)
        name, sm = f"{total / GIB:.1f} GiB device", None
    else:
        preset = get_preset(options.gpu or (example.gpu if example else None) or DEFAULT_GPU)
        total, name, sm = preset.total_bytes, preset.name, preset.sm
    if options.pre_load_free_bytes is not None:
        free = parse_bytes(options.pre_load_free_bytes)
        if free > total:
            raise PlanError(
                f"--pre-load-free-bytes {free} exceeds the device's total memory {total}"
            )
    else:
        free = pre_load_free_bytes(total)
    resident = None
    if options.resident_bytes is not None:
        resident = parse_bytes(options.resident_bytes)
        if resident >= free:
            raise PlanError(f"--resident-bytes {resident} is not below the free memory {free}")
    return DeviceSpec(
        name=name, total_bytes=total, pre_load_free_bytes=free, resident_bytes=resident, sm=sm
    )


@contextlib.contextmanager
def _quiet_sglang(verbose: bool) -> Iterator[None]:
    """SGLang's import warnings and server-args logs, silenced unless --verbose."""
    if verbose:
        yield
        return
    logger = logging.getLogger("sglang")
    level = logger.level
    logger.setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            logger.setLevel(level)


def _plan(options: argparse.Namespace, launch: list[str]) -> OfflinePlan:
    """The plan for parsed planner options plus launch flags; raises ValueError on bad input."""
    example = None
    if options.example is not None or not _launch_preview(launch).model_path:
        example = load_example(options.example or DEFAULT_EXAMPLE)
        launch = [*example.launch_args, *launch]  # later flags win in argparse
    device = _device(options, example)
    if "--config" not in launch:
        check_launch_values(**vars(_launch_preview(launch)))
    replay = installed_replay()
    check_requested_release(options.sglang_version, replay)
    with _quiet_sglang(options.verbose):
        server_args = replay.parse_launch(launch)
        check_launch_values(
            server_args.model_path,
            server_args.speculative_draft_model_path,
            server_args.speculative_algorithm,
            server_args.mem_fraction_static,
        )
        check_divisor_sizes(server_args)
        return build_plan(server_args, device, replay)


def _set_host_cpu_engine() -> None:
    """Plan for ``--device``, not as a CPU engine (the process's own entry point only)."""
    if "sglang" not in sys.modules:
        os.environ.pop(CPU_ENGINE_ENV, None)


def _bad_input(command: str, error: Exception) -> int:
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    print(f"sglang-specinit {command}: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _report_parser() -> argparse.ArgumentParser:
    parser = RaisingParser(
        prog="sglang-specinit report",
        allow_abbrev=False,
        description=(
            "Write a memory report (Markdown page, PNG and SVG figures) to --out. Inputs: "
            "--from-json files or directories (plan --json output, benchmark case-*.json, "
            "servers' memory-rank*.json), and/or any plan invocation's flags; with neither, "
            "every shipped example."
        ),
    )
    parser.add_argument("--out", required=True, help="directory to write the report into")
    parser.add_argument(
        "--from-json",
        nargs="+",
        default=[],
        metavar="PATH",
        help="breakdown JSON files, or directories searched for memory-rank*.json / case-*.json",
    )
    parser.add_argument(
        "--beside",
        metavar="VENV",
        help=(
            "another SGLang release's environment (e.g. .venv-sglang0514): each planned case "
            "also shows that release's stock column, computed there by its own code"
        ),
    )
    return parser


def report_main(argv: Sequence[str]) -> int:
    """``sglang-specinit report``; returns the exit code."""
    from sglang_specinit.planner import report_cases, report_pages

    _offline()
    skipped: dict[str, str] = {}
    try:
        request, plan_argv = _report_parser().parse_known_args(list(argv))
        _check_writable(Path(request.out))
        cases = report_cases.cases_from_paths(request.from_json)
        runs: list[list[str]] = []
        if plan_argv:  # one plan invocation
            runs = [plan_argv]
        elif not request.from_json:  # nothing asked for: every shipped example
            names, skipped = _plannable()
            runs = [["--example", n] for n in names]
        beside = None
        if request.beside is not None:
            if not runs:
                raise PlanError("--beside needs a plan: give plan flags, or no --from-json")
            beside = Beside(request.beside)
        for run in runs:
            options, launch = _planner_parser().parse_known_args(run)
            example = load_example(options.example) if options.example else None
            data = plan_json(_plan(options, launch))
            if beside is not None:
                data = beside.add_stock(data, run)
            cases.append(
                report_cases.case_from_plan_json(
                    data,
                    name=example.name if example else None,
                    description=example.description if example else None,
                )
            )
        cases = report_cases.unique_slugs(cases)
    except ValueError as e:
        return _bad_input("report", e)
    try:
        result = report_pages.write_report(cases, Path(request.out), skipped_cases=skipped)
    except OSError as e:  # what the check above cannot see as root: /proc, a full disk
        error = PlanError(f"cannot write the report to --out {request.out}: {e.strerror or e}")
        return _bad_input("report", error)
    if result.figures_skipped:
        print(f"sglang-specinit report: {result.figures_skipped}", file=sys.stderr)
    print(f"wrote {result.page} ({len(cases)} cases, {len(result.figures)} figure files)")
    return 0


def _check_writable(out_dir: Path) -> None:
    """Refuse an unwritable --out before anything is planned or created."""
    existing = out_dir.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise PlanError(f"cannot write the report to --out {out_dir}: {existing} is no directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PlanError(f"cannot write the report to --out {out_dir}: {existing} is read-only")


def _plannable() -> tuple[list[str], dict[str, str]]:
    """The shipped examples the installed release plans, and why it refuses the others."""
    replay = installed_replay()
    names: list[str] = []
    skipped: dict[str, str] = {}
    for name in list_examples():
        refusal = example_refusal(name, replay)
        if refusal is None:
            names.append(name)
        else:
            skipped[name] = refusal
            print(f"sglang-specinit report: example {name} skipped: {refusal}", file=sys.stderr)
    return names, skipped


def _offline() -> None:
    # Read before huggingface_hub is imported: the planner never touches the network.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def plan_main(argv: Sequence[str]) -> int:
    """``sglang-specinit plan``; returns the exit code."""
    _offline()
    try:
        options, launch = _planner_parser().parse_known_args(list(argv))
        plan = _plan(options, launch)
    except ValueError as e:  # PlanError, BudgetError, WeightsError and SGLang's own checks
        return _bad_input("plan", e)
    except ModuleNotFoundError as e:  # a release whose pool code imports sgl_kernel's ops
        if (e.name or "").partition(".")[0] != "sgl_kernel":
            raise
        message = (
            f"the installed sglang's pool code imports {e.name}, which does not import here: "
            "install the sglang-kernel package its release pins, or plan on a host that has it"
        )
        return _bad_input("plan", PlanError(message))
    if options.json:
        print(json.dumps(plan_json(plan), indent=2, sort_keys=True))
    else:
        print(plan_text(plan))
    return 0


# What a shell reports for a process its reader closed the pipe on (128 + SIGPIPE).
EXIT_CLOSED_PIPE = 141


def version_line() -> str:
    """This package's version, the installed sglang's and what the plugin does with it."""
    from importlib.metadata import PackageNotFoundError, version

    from sglang_specinit import compat

    try:
        ours = version("sglang-specinit")
    except PackageNotFoundError:
        ours = "(not installed)"
    sglang = compat.installed_sglang_version()
    if sglang is None:
        return f"sglang-specinit {ours}; sglang not installed"
    decision = compat.decide_for_version(sglang)
    served = f"served by {decision.adapter}" if decision.adapter else "not served"
    return f"sglang-specinit {ours}; sglang {sglang} ({served})"


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point (``sglang-specinit``); ``argv`` None: this process's own."""
    if argv is None:
        _set_host_cpu_engine()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if not args or args[0] in ("-h", "--help"):
            print(
                "usage: sglang-specinit plan [launch_server flags] [planner flags]; "
                "see plan --help\n"
                "       sglang-specinit report --out DIR [--from-json PATH ...] [plan flags]; "
                "see report --help\n"
                "       sglang-specinit patches [--release R]; see patches --help\n"
                "       sglang-specinit --version"
            )
            return 0 if args else EXIT_BAD_INPUT
        if args[0] == "--version":
            print(version_line())
            return 0
        commands = {"plan": plan_main, "report": report_main, "patches": patches_main}
        if args[0] not in commands:
            print(
                f"sglang-specinit: error: unknown command {args[0]!r} "
                "(available: plan, report, patches, --version)",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        return commands[args[0]](args[1:])
    except BrokenPipeError:
        # `... | head`: the reader is gone; keep the exit-time flush from raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_CLOSED_PIPE


if __name__ == "__main__":
    sys.exit(main())
