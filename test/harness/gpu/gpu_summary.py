"""Verdict of a GPU suite run, from pytest's JUnit XML: which cases ran, which were skipped, why;
and each test's outcome written the moment it ends (:func:`record`: a JSON line, a JUnit file)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.gpu import case_report

PYTEST_NO_TESTS_COLLECTED = 5
OUT_DIR_ENV = "SPECINIT_GPU_OUT_DIR"
RESULTS = "results.jsonl"
PARTIAL_JUNIT = "junit-partial.xml"


def out_dir() -> Path | None:
    value = os.environ.get(OUT_DIR_ENV, "").strip()
    return Path(value) if value else None


def record(directory: Path, nodeid: str, outcome: str, detail: str, seconds: float) -> None:
    """Append one finished test and rewrite the partial JUnit report from every line so far."""
    directory.mkdir(parents=True, exist_ok=True)
    line = {"nodeid": nodeid, "outcome": outcome, "detail": detail[:500], "seconds": seconds}
    with (directory / RESULTS).open("a") as f:
        f.write(json.dumps(line) + "\n")
    write_junit(read(directory), directory / PARTIAL_JUNIT)


def read(directory: Path) -> list[dict[str, Any]]:
    path = directory / RESULTS
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def write_junit(results: list[dict[str, Any]], path: Path) -> None:
    suite = ET.Element("testsuite", name="gpu", tests=str(len(results)))
    for r in results:
        module, _, name = r["nodeid"].partition("::")
        classname = module.removesuffix(".py").replace("/", ".")
        case = ET.SubElement(
            suite, "testcase", classname=classname, name=name, time=f"{r['seconds']:.1f}"
        )
        tag = {"failed": "failure", "error": "error", "skipped": "skipped"}.get(r["outcome"])
        if tag:
            ET.SubElement(case, tag, message=r["detail"])
    tmp = path.with_suffix(".tmp")
    ET.ElementTree(suite).write(tmp)
    tmp.replace(path)


@dataclass(frozen=True)
class CaseOutcome:
    name: str
    outcome: str
    detail: str = ""

    @property
    def ran(self) -> bool:
        return self.outcome in ("passed", "failed", "error")


def read_outcomes(report: Path) -> list[CaseOutcome]:
    outcomes = []
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
        outcome, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            child = case.find(tag)
            if child is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                detail = (child.get("message") or child.text or "").strip().splitlines()[0:1]
                detail = detail[0] if detail else ""
                break
        outcomes.append(CaseOutcome(name, outcome, detail))
    return outcomes


def verdict(outcomes: list[CaseOutcome], pytest_exit_code: int) -> tuple[int, str]:
    lines = [f"{o.outcome:8} {o.name}" + (f"  ({o.detail})" if o.detail else "") for o in outcomes]
    ran = [o for o in outcomes if o.ran]
    skipped = [o for o in outcomes if o.outcome == "skipped"]
    counts = (
        f"{sum(o.outcome == 'passed' for o in outcomes)} passed, "
        f"{sum(o.outcome in ('failed', 'error') for o in outcomes)} failed, "
        f"{len(skipped)} skipped"
    )
    if not ran:
        why = "; ".join(sorted({o.detail for o in skipped})) or "pytest collected no GPU test"
        return 1, "\n".join([*lines, f"GPU suite: FAILED, no GPU case ran ({counts}): {why}"])
    if pytest_exit_code not in (0, PYTEST_NO_TESTS_COLLECTED):
        return pytest_exit_code, "\n".join([*lines, f"GPU suite: FAILED ({counts})"])
    return 0, "\n".join([*lines, f"GPU suite: passed ({counts})"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="pytest --junitxml output")
    parser.add_argument("--pytest-exit-code", type=int, required=True)
    parser.add_argument(
        "--cases-dir", type=Path, default=None, help="pytest --basetemp: print its case reports"
    )
    parser.add_argument(
        "--step-summary",
        type=Path,
        default=None,
        help="append the per-case table (markdown) here, e.g. $GITHUB_STEP_SUMMARY",
    )
    args = parser.parse_args(argv)
    reports = []
    if args.cases_dir is not None and args.cases_dir.is_dir():
        reports = case_report.read_reports(args.cases_dir)
        for line in case_report.summary_lines(reports):
            print(line)
    report = args.report
    partial = report.parent / PARTIAL_JUNIT
    if not report.is_file() and partial.is_file():
        # pytest never exited (killed at the job's limit): the tests that ended, as they ended.
        print(f"GPU suite: pytest wrote no {report.name}; reading {partial.name}", file=sys.stderr)
        report = partial
    if args.step_summary is not None:
        with args.step_summary.open("a") as f:
            f.write(case_report.markdown_table(reports) + "\n")
    if not report.is_file():
        print(f"GPU suite: FAILED, pytest wrote no report at {args.report}", file=sys.stderr)
        return args.pytest_exit_code or 1
    code, text = verdict(read_outcomes(report), args.pytest_exit_code)
    print(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
