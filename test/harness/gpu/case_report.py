"""One GPU case's own record: every launch it made, what each one did, and its wall time."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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


def summary_lines(reports: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in reports:
        launches = "; ".join(
            f"{x['role']} f={x['mem_fraction']}: {x['outcome']} ({x['seconds']:.0f} s)"
            for x in r["launches"]
        )
        mode = "deterministic" if r["deterministic"] else "default kernels"
        lines.append(
            f"case {r['case']} on sglang {r['release']} ({mode}), {r['wall_seconds']:.0f} s: "
            f"{launches or 'no launch'}"
        )
        lines += [f"    {key}: {value}" for key, value in r["results"].items()]
    return lines


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
