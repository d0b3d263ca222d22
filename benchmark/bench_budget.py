"""Budget use on a CPU launch matrix: this package, stock 0.5.13.post1 and the real sglang 0.5.14.

For each case (EAGLE, EAGLE3 with a draft of another KV geometry, EAGLE3 with
``num_nextn_predict_layers: 0``, STANDALONE with a 1-layer llama draft) it starts three real
Engines on device cpu with the same tiny checkpoints and the same simulated memory meter
(``test/harness``): 0.5.13.post1 with the plugin (patched), 0.5.13.post1 without it (stock),
and sglang 0.5.14 from ``.venv-sglang0514`` (upstream, run with the plugin off). Every
number is read from the scheduler process's harness report:

- tokens, target and draft pool bytes: the live pools;
- budget and resident-at-sizing: the two meter readings SGLang sized from
  (``harness.reports.report_reading.meter_budget``);
- target weights: resident when stock sized its pool (only the target exists then);
  other resident: what phased inits (patched, 0.5.14) hold beyond that before the draft
  starts (a few KiB the target worker allocates after loading);
- draft weights: resident-at-sizing minus what was resident when the draft started. For
  0.5.14 this includes the draft's duplicate embed/lm_head, which it sizes with and frees
  afterwards; stock loads the draft after sizing, and its bound draft weights are taken from
  the patched run (same tensors).

Where 0.5.14 cannot start (no ``.venv-sglang0514``, or a start error), its column is left out
and the case's notes say why. Nothing is asserted.

Each case is written as ``case-<name>.json`` (the breakdown shape ``sglang-specinit report``
reads) into ``--out``, and the report (Markdown + figures) is rendered there from every case
file in it.

sglang 0.5.23 section (``measure_0_5_23``): the same tiny target with EAGLE, EAGLE3 (reduced
vocabulary), EAGLE3 ``num_nextn_predict_layers: 0`` and STANDALONE drafts, launched on the real
0.5.23 init in ``.venv-sglang0523`` (``_bench_0_5_23.py``), stock and patched: 0.5.23's own
draft reserve per token, what the draft allocates, this package's price, budget use of both
runs and the duplicate embed/lm_head bytes resident when the target pool is profiled.

    .venv/bin/python benchmark/bench_budget.py [--case NAME ...] [--sglang-version V ...]
        [--out docs/bench-budget]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from _common import (
    CASES,
    FRACTION,
    REPO_ROOT,
    UPSTREAM_0_5_14_PYTHON,
    Case,
    Launch,
    launch,
    table,
)
from harness.launch.engine import SGLangStartError
from harness.reports.report_reading import (
    INIT_TORCH_DISTRIBUTED,
    meter_budget,
    pool_bytes,
    pre_load_reading,
    reading_seqs,
    readings,
    runner,
)
from sglang_specinit.planner.cli import main as specinit_cli
from sglang_specinit.planner.report_cases import slugify
from sglang_specinit.report import human_bytes

DEFAULT_OUT = REPO_ROOT / "docs" / "bench-budget"
MEASURED = "measured"


def target_resident_before_draft(report: dict[str, Any]) -> int:
    """Bytes the target left resident when the draft runner started (phased inits): the
    draft's first meter reading against the target's pre-load reading."""
    first_draft = reading_seqs(report, INIT_TORCH_DISTRIBUTED, True)[0]
    return readings(report)[first_draft]["used_bytes"] - pre_load_reading(report)["used_bytes"]


def breakdown(
    run: Launch | None,
    *,
    tokens: int,
    budget_bytes: int,
    pre_load_free_bytes: int,
    target_weights: int,
    draft_weights: int,
    target_pool: int,
    other_resident: int = 0,
    draft_pool: int,
    source: str,
    title: str,
    note: str | None = None,
    max_running_requests: int | None = None,
) -> dict[str, Any]:
    """One variant in the breakdown keys of ``plan --json`` (and of the report's input)."""
    resident = target_weights + draft_weights + other_resident
    used = resident + target_pool + draft_pool
    if run is not None:
        max_running_requests = run.report["scheduler"]["max_running_requests"]
    return {
        "title": title,
        "source": source,
        "source_note": note,
        "tokens": tokens,
        "max_running_requests": max_running_requests,
        "mem_fraction_static": FRACTION,
        "pre_load_free_bytes": pre_load_free_bytes,
        "budget_bytes": budget_bytes,
        "target_weight_bytes": target_weights,
        "draft_weight_bytes": draft_weights,
        "resident_bytes": resident,
        "target_kv_pool_bytes": target_pool,
        "draft_kv_pool_bytes": draft_pool,
        "used_bytes": used,
        "headroom_bytes": budget_bytes - used,
    }


def measured(run: Launch, title: str, target_weights: int, draft_weights: int | None = None):
    """A phased run's (patched, 0.5.14) or, with ``draft_weights``, stock's breakdown."""
    meter = meter_budget(run.report, FRACTION)
    other = 0
    if draft_weights is None:
        before_draft = target_resident_before_draft(run.report)
        other = before_draft - target_weights
        draft_weights = meter.resident_bytes - before_draft
    return breakdown(
        run,
        tokens=runner(run.report, "target")["kv_pool"]["size"],
        budget_bytes=meter.budget_bytes,
        pre_load_free_bytes=meter.pre_load_free_bytes,
        target_weights=target_weights,
        draft_weights=draft_weights,
        other_resident=other,
        target_pool=pool_bytes(run.report, "target"),
        draft_pool=pool_bytes(run.report, "draft"),
        source=MEASURED,
        title=title,
    )


def start_failure(error: BaseException) -> str:
    """One line on why an Engine did not start (the scheduler's exception where known)."""
    if isinstance(error, SGLangStartError) and error.scheduler_error:
        text = error.scheduler_error
    else:
        text = str(error).split("--- log tail ---")[0]
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(error).__name__


def measure(case: Case, upstream_python: Path) -> dict[str, Any]:
    """The case's three launches as one report input (this package at the top level)."""
    patched = launch(case, True)
    stock = launch(case, False)
    stock_target = meter_budget(stock.report, FRACTION).resident_bytes
    ours = measured(patched, "sglang-specinit", stock_target)
    draft_weights = ours["draft_weight_bytes"]

    result: dict[str, Any] = {
        **ours,
        "case_name": case.name,
        "description": (
            f"`--speculative-algorithm {case.algorithm}`, tiny generated target and draft, "
            f"device cpu with a simulated {human_bytes(patched.report['meter']['capacity_bytes'])}"
            f" meter, `--mem-fraction-static {FRACTION}`; every variant a real Engine start "
            "(0.5.14's column only where it started)"
        ),
        "speculative_algorithm": case.algorithm,
        "stock_0_5_13": measured(stock, "stock 0.5.13.post1", stock_target, draft_weights),
    }
    result["stock_0_5_13"]["source_note"] = (
        "draft weights load after the pool is sized; their bound size is the patched run's"
    )
    try:
        if not upstream_python.exists():
            raise FileNotFoundError(f"{upstream_python} is absent (scripts/setup.sh builds it)")
        upstream = launch(case, False, python=upstream_python, sglang_release="0.5.14")
        up = measured(upstream, "upstream 0.5.14", stock_target)
        up["source_note"] = (
            "draft weights as resident when 0.5.14 sized the pool (its duplicate "
            "embed/lm_head included; freed after the pools exist)"
        )
        result["upstream_0_5_14"] = up
    except (SGLangStartError, FileNotFoundError, TimeoutError) as e:
        result["plan_notes"] = [f"sglang 0.5.14 could not start on CPU: {start_failure(e)}"]
    return result


def _rows(result: dict[str, Any]) -> list[list[str]]:
    rows = []
    for key in ("stock_0_5_13", "upstream_0_5_14", None):
        r = result if key is None else result.get(key)
        if r is None:
            continue
        over = r["used_bytes"] - r["budget_bytes"]
        rows.append(
            [
                f"{r['title']} ({r['source']})",
                str(r["tokens"]),
                human_bytes(r["target_weight_bytes"]),
                human_bytes(r["draft_weight_bytes"]),
                human_bytes(
                    r["resident_bytes"] - r["target_weight_bytes"] - r["draft_weight_bytes"]
                ),
                human_bytes(r["target_kv_pool_bytes"]),
                human_bytes(r["draft_kv_pool_bytes"]),
                human_bytes(r["used_bytes"]),
                f"{100 * r['used_bytes'] / r['budget_bytes']:.2f} %",
                f"{int(over):+d}",
            ]
        )
    return rows


HEADER = [
    "rule",
    "tokens",
    "target weights",
    "draft weights",
    "other resident",
    "target KV",
    "draft KV",
    "used",
    "used/budget",
    "used-budget (B)",
]


# ----------------------------------------------------------------------- sglang 0.5.23 section

SGLANG_0_5_23_PYTHON = REPO_ROOT / ".venv-sglang0523" / "bin" / "python"


def measure_0_5_23() -> list[dict[str, float]]:
    """Stock vs patched on the real 0.5.23 init, one row per draft kind (its own venv)."""
    import subprocess

    if not SGLANG_0_5_23_PYTHON.exists():
        print("[bench_budget] .venv-sglang0523 is absent (scripts/setup.sh builds it)")
        return []
    print("[bench_budget] sglang 0.5.23: patched and stock launches per draft kind ...")
    proc = subprocess.run(
        [str(SGLANG_0_5_23_PYTHON), str(Path(__file__).parent / "_bench_0_5_23.py")],
        capture_output=True,
        text=True,
        check=True,
    )
    prefix = "BENCH0523 "
    return [
        json.loads(ln[len(prefix) :]) for ln in proc.stdout.splitlines() if ln.startswith(prefix)
    ]


def print_0_5_23(rows: list[dict[str, float]]) -> None:
    print()
    print(
        f"sglang 0.5.23 (measured, device cpu, simulated 256 MiB, --mem-fraction-static {FRACTION})"
    )
    print(
        table(
            [
                "draft kind",
                "0.5.23 reserve/token",
                "draft allocates/token",
                "our price/token",
                "tokens stock",
                "tokens patched",
                "use stock",
                "use patched",
                "dup. at profile stock",
                "dup. at profile patched",
            ],
            [
                [
                    r["kind"],
                    f"{r['upstream_reserve_per_token']} B",
                    f"{r['draft_allocates_per_token']} B",
                    f"{r['our_price_per_token']} B",
                    str(r["tokens_stock"]),
                    str(r["tokens_patched"]),
                    f"{100 * r['used_stock'] / r['budget']:.2f} %",
                    f"{100 * r['used_patched'] / r['budget']:.2f} %",
                    human_bytes(r["duplicates_at_profile_stock"]),
                    human_bytes(r["duplicates_at_profile_patched"]),
                ]
                for r in rows
            ],
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="default: all")
    parser.add_argument(
        "--sglang-version",
        action="append",
        choices=("0.5.13.post1", "0.5.23"),
        help="releases to measure (default: both)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="where case-*.json and the rendered report go (default: docs/bench-budget)",
    )
    parser.add_argument(
        "--upstream-python",
        type=Path,
        default=UPSTREAM_0_5_14_PYTHON,
        help="interpreter with sglang 0.5.14 (default: .venv-sglang0514/bin/python)",
    )
    args = parser.parse_args()
    releases = args.sglang_version or ["0.5.13.post1", "0.5.23"]
    if "0.5.13.post1" in releases:
        main_0_5_13(args.case or list(CASES), args.out, args.upstream_python)
    if "0.5.23" in releases:
        print_0_5_23(measure_0_5_23())


def main_0_5_13(names: list[str], out: Path, upstream_python: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)

    results = {}
    for name in names:
        print(f"[bench_budget] {name}: patched, stock and 0.5.14 launches ...", flush=True)
        results[name] = measure(CASES[name], upstream_python)
        path = out / f"case-{slugify(name)}.json"
        path.write_text(json.dumps(results[name], indent=1, sort_keys=True) + "\n")

    print()
    print(f"Budget use on device cpu (simulated meter, --mem-fraction-static {FRACTION})")
    for name, result in results.items():
        print()
        print(name)
        print(table(HEADER, _rows(result)))
        for key in ("stock_0_5_13", "upstream_0_5_14"):
            if result.get(key, {}).get("source_note"):
                print(f"  * {result[key]['title']}: {result[key]['source_note']}")
        for note in result.get("plan_notes", ()):
            print(f"  * {note}")

    print()
    print("Summary (token ratios; budget use)")
    summary = []
    for name, r in results.items():
        s, u = r["stock_0_5_13"], r.get("upstream_0_5_14")
        summary.append(
            [
                name,
                f"{r['tokens'] / s['tokens']:.3f}",
                f"{r['tokens'] / u['tokens']:.3f}" if u and u["tokens"] else "-",
                f"{100 * r['used_bytes'] / r['budget_bytes']:.2f} %",
                f"{100 * s['used_bytes'] / s['budget_bytes']:.2f} %",
                f"{100 * u['used_bytes'] / u['budget_bytes']:.2f} %" if u else "-",
            ]
        )
    print(
        table(
            [
                "case",
                "tokens ours/stock",
                "ours/0.5.14",
                "use ours",
                "use stock",
                "use 0.5.14",
            ],
            summary,
        )
    )
    print()
    specinit_cli(["report", "--out", str(out), "--from-json", str(out)])


if __name__ == "__main__":
    main()
