"""Each GPU test's outcome written the moment it ends: a JSON line and a JUnit file."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

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
