"""A GPU run's verdict from JUnit XML, per-test records as they end, and case reports."""

from __future__ import annotations

import argparse
import json
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

PYTEST_NO_TESTS_COLLECTED = 5
RESULTS = "results.jsonl"
PARTIAL_JUNIT = "junit-partial.xml"


def record(directory: Path, nodeid: str, outcome: str, detail: str, seconds: float) -> None:
    """Append one finished test and rewrite the partial JUnit report from every line so far."""
    directory.mkdir(parents=True, exist_ok=True)
    line = {"nodeid": nodeid, "outcome": outcome, "detail": detail[:500], "seconds": seconds}
    with (directory / RESULTS).open("a") as f:
        f.write(json.dumps(line) + "\n")
    lines = (directory / RESULTS).read_text().splitlines()
    results = [json.loads(x) for x in lines if x.strip()]
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
    path = directory / PARTIAL_JUNIT
    ET.ElementTree(suite).write(path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)


class CaseOutcome(NamedTuple):
    name: str
    outcome: str
    detail: str


def read_outcomes(report: Path) -> list[CaseOutcome]:
    outcomes = []
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
        tags = ("failure", "error", "skipped")
        tag, child = next(((t, c) for t in tags if (c := case.find(t)) is not None), ("", None))
        text = "" if child is None else (child.get("message") or child.text or "").strip()
        outcome = {"failure": "failed", "": "passed"}.get(tag, tag)
        outcomes.append(CaseOutcome(name, outcome, text.splitlines()[0] if text else ""))
    return outcomes


def verdict(outcomes: list[CaseOutcome], pytest_exit_code: int) -> tuple[int, str]:
    lines = [f"{o.outcome:8} {o.name}" + (f"  ({o.detail})" if o.detail else "") for o in outcomes]
    ran = [o for o in outcomes if o.outcome in ("passed", "failed", "error")]
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


FILE_NAME = "case-report.json"
# What a stock launch that died of an out-of-memory error at the case's fraction means.
STOCK_OOM_AT_F = "stock cannot start at f={f}, the plugin can"


@dataclass
class Launch:
    """One server launch of a case: role, fraction, outcome and seconds to teardown."""

    role: str
    mem_fraction: str
    outcome: str = "running"
    seconds: float = 0.0


@dataclass
class CaseReport:
    case: str
    release: str
    deterministic: bool
    path: Path
    launches: list[Launch] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    wall_seconds: float = 0.0
    _started: float = field(default_factory=time.monotonic, repr=False)

    def save(self) -> Path:
        self.wall_seconds = round(time.monotonic() - self._started, 1)
        body = {k: v for k, v in asdict(self).items() if not k.startswith("_") and k != "path"}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=1, default=str))
        tmp.replace(self.path)
        return self.path

    def result(self, key: str, value: Any) -> None:
        self.results[key] = value
        self.save()

    @contextmanager
    def launch(self, role: str, mem_fraction: str) -> Iterator[Launch]:
        """Record one launch: ``served``, or (the block raised) the error's first line."""
        entry = Launch(role, mem_fraction)
        self.launches.append(entry)
        started = time.monotonic()
        self.save()
        try:
            yield entry
            if entry.outcome == "running":
                entry.outcome = "served"
        except BaseException as error:
            if entry.outcome == "running":
                first = (str(error).strip().splitlines() or [type(error).__name__])[0]
                entry.outcome = f"failed: {first[:200]}"
            raise
        finally:
            entry.seconds = round(time.monotonic() - started, 1)
            self.save()


def new_report(case: str, release: str, deterministic: bool, directory: Path) -> CaseReport:
    directory.mkdir(parents=True, exist_ok=True)
    report = CaseReport(case, release, deterministic, directory / FILE_NAME)
    report.save()
    return report


def read_reports(root: Path) -> list[dict[str, Any]]:
    found = [json.loads(p.read_text()) for p in sorted(root.rglob(FILE_NAME))]
    return sorted(found, key=lambda r: r["case"])


TABLE_HEADER = (
    "| case | release | launches | plugin tokens | stock tokens | plugin/stock | batch lists "
    "equal | accept length plugin / stock | output tok/s plugin / stock | peak GiB init / "
    "capture (plugin) | free GiB after capture (plugin) | failed checks |"
)


def _gib(by_device: Any) -> str:
    if not by_device:
        return "n/a"
    return "/".join(f"{int(v) / (1 << 30):.1f}" for _, v in sorted(by_device.items()))


def _row(r: dict[str, Any]) -> str:
    res = r["results"]
    tokens = res.get("tokens") or {}
    serving = res.get("serving") or {}
    plugin, stock = serving.get("plugin") or {}, serving.get("stock") or {}
    memory = plugin.get("device_memory") or {}
    peaks = memory.get("peak_used_bytes") or {}

    def pair(key: str, fmt: str) -> str:
        values = [side.get(key) for side in (plugin, stock)]
        return " / ".join("n/a" if v is None else format(v, fmt) for v in values)

    launches = ", ".join(f"{x['role']} {x['outcome']}" for x in r["launches"]) or "none"
    batch = res.get("cuda_graph_batch_lists") or {}
    return (
        f"| {r['case']} | {r['release']} | {launches} | {tokens.get('plugin', 'n/a')} | "
        f"{tokens.get('stock', 'n/a')} | {tokens.get('ratio', 'n/a')} | "
        f"{batch.get('args_equal', 'n/a')} | {pair('accept_length', '.2f')} | "
        f"{pair('output_throughput_tok_s', '.0f')} | "
        f"{_gib(peaks.get('init'))} / {_gib(peaks.get('capture'))} | "
        f"{_gib(memory.get('free_after_capture_bytes'))} | "
        f"{', '.join(res.get('verdict') or {}) or 'none'} |"
    )


def markdown_table(reports: list[dict[str, Any]]) -> str:
    columns = TABLE_HEADER.count("|") - 1
    lines = ["### GPU cases", "", TABLE_HEADER, "|" + "---|" * columns]
    lines += [_row(r) for r in reports] or ["| (no case wrote a report) |" + " |" * (columns - 1)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="pytest --junitxml output")
    parser.add_argument("--pytest-exit-code", type=int, required=True)
    parser.add_argument("--cases-dir", type=Path, help="pytest --basetemp: print its case reports")
    parser.add_argument("--step-summary", type=Path, help="append the per-case table (markdown)")
    args = parser.parse_args(argv)
    cases = args.cases_dir
    reports = read_reports(cases) if cases is not None and cases.is_dir() else []
    for r in reports:
        launches = "; ".join(
            f"{x['role']} f={x['mem_fraction']}: {x['outcome']} ({x['seconds']:.0f} s)"
            for x in r["launches"]
        )
        mode = "deterministic" if r["deterministic"] else "default kernels"
        print(
            f"case {r['case']} on sglang {r['release']} ({mode}), {r['wall_seconds']:.0f} s: "
            f"{launches or 'no launch'}"
        )
        for key, value in r["results"].items():
            print(f"    {key}: {value}")
    report = args.report
    partial = report.parent / PARTIAL_JUNIT
    if not report.is_file() and partial.is_file():
        # pytest never exited (killed at the job's limit): the tests that ended, as they ended.
        print(f"GPU suite: pytest wrote no {report.name}; reading {partial.name}", file=sys.stderr)
        report = partial
    if args.step_summary is not None:
        with args.step_summary.open("a") as f:
            f.write(markdown_table(reports) + "\n")
    if not report.is_file():
        print(f"GPU suite: FAILED, pytest wrote no report at {args.report}", file=sys.stderr)
        return args.pytest_exit_code or 1
    code, text = verdict(read_outcomes(report), args.pytest_exit_code)
    print(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
