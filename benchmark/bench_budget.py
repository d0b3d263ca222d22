"""Budget use, (weights + KV pools) / (f x free before loading), on a CPU launch matrix.

For each case (EAGLE, EAGLE3 with a draft of another KV geometry, EAGLE3 with
``num_nextn_predict_layers: 0``, STANDALONE with a 1-layer llama draft) it launches the tiny
Engine twice, patched and stock, and reads everything from the scheduler process (harness
report: live pool bytes and the simulated memory meter):

- patched (measured): resident bytes at the target's pool sizing + live target and draft pools;
- stock (measured): the same, plus the draft's resident weights, which stock loads after
  sizing (taken as the patched run's resident minus stock's: the same tensors once bound);
- upstream 0.5.14 (modelled): ``budget.upstream_0_5_14_plan`` on the same measured inputs
  (no 0.5.14 Engine is run: it is the rule applied to these numbers).

Prints a table per case and a summary with ratios. Nothing is asserted.

sglang 0.5.23 section (``measure_0_5_23``): the same tiny target with EAGLE, EAGLE3 (reduced
vocabulary), EAGLE3 ``num_nextn_predict_layers: 0`` and STANDALONE drafts, launched on the real
0.5.23 init in ``.venv-sglang0523`` (``_bench_0_5_23.py``), stock and patched: 0.5.23's own
draft reserve per token, what the draft allocates, this package's price, budget use of both
runs and the duplicate embed/lm_head bytes resident when the target pool is profiled.

    .venv/bin/python benchmark/bench_budget.py [--case NAME ...] [--sglang-version V ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

from _common import CASES, DEFAULT_TARGET, FRACTION, REPO_ROOT, Case, launch, table
from harness.report_reading import kv_spec, meter_budget, pool_bytes, runner
from sglang_specinit import budget
from sglang_specinit.report import human_bytes
from sglang_specinit.specs import upstream_reserved_layers


def draft_layers_0_5_14(case: Case, draft_path) -> int:
    """The ``d`` 0.5.14 reserves for this draft (from its config.json)."""
    config = json.loads((draft_path / "config.json").read_text())
    layers = config["num_hidden_layers"]
    return upstream_reserved_layers(
        case.algorithm,
        SimpleNamespace(
            num_nextn_predict_layers=config.get("num_nextn_predict_layers"),
            num_hidden_layers=layers,
            num_attention_layers=layers,
            hf_config=SimpleNamespace(num_hidden_layers=layers),
        ),
    )


def measure(case: Case) -> dict[str, dict[str, float]]:
    patched = launch(case, True)
    stock = launch(case, False)
    patched_meter = meter_budget(patched.report, FRACTION)
    pre_free = patched_meter.pre_load_free_bytes
    budget_bytes = patched_meter.budget_bytes
    patched_resident = patched_meter.resident_bytes
    stock_target_resident = meter_budget(stock.report, FRACTION).resident_bytes
    draft_resident = patched_resident - stock_target_resident

    shape = case.draft_shape
    inputs = budget.BudgetInputs(
        pre_load_free_bytes=pre_free,
        mem_fraction_static=FRACTION,
        target_kv=kv_spec(DEFAULT_TARGET),
        target_weight_bytes=stock_target_resident,
        page_size=1,
        context_len=DEFAULT_TARGET.max_position_embeddings,
        draft=budget.DraftSpec(
            algorithm=case.algorithm,
            kv_pools=(kv_spec(shape),),
            weight_bytes=draft_resident,
            shared_weight_bytes=case.shared_tensors
            * shape.vocab
            * shape.hidden
            * shape.dtype_bytes,
            upstream_reserved_layers=draft_layers_0_5_14(case, patched.draft_path),
        ),
        max_running_requests=patched.report["server_args"]["max_running_requests"],
    )
    upstream = budget.upstream_0_5_14_plan(inputs)

    def row(tokens: int, weights: int, target_pool: int, draft_pool: int) -> dict[str, float]:
        used = weights + target_pool + draft_pool
        return {
            "tokens": tokens,
            "weights": weights,
            "target_pool": target_pool,
            "draft_pool": draft_pool,
            "used": used,
            "budget": budget_bytes,
            "use": used / budget_bytes,
        }

    return {
        "patched": row(
            runner(patched.report, "target")["kv_pool"]["size"],
            patched_resident,
            pool_bytes(patched.report, "target"),
            pool_bytes(patched.report, "draft"),
        ),
        "stock": row(
            runner(stock.report, "target")["kv_pool"]["size"],
            stock_target_resident + draft_resident,
            pool_bytes(stock.report, "target"),
            pool_bytes(stock.report, "draft"),
        ),
        "upstream 0.5.14 (model)": row(
            upstream.tokens,
            upstream.resident_bytes,
            upstream.target_kv_pool_bytes,
            upstream.draft_kv_pool_bytes,
        ),
    }


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
    args = parser.parse_args()
    releases = args.sglang_version or ["0.5.13.post1", "0.5.23"]
    if "0.5.13.post1" in releases:
        main_0_5_13(args.case or list(CASES))
    if "0.5.23" in releases:
        print_0_5_23(measure_0_5_23())


def main_0_5_13(names: list[str]) -> None:

    results = {}
    for name in names:
        print(f"[bench_budget] {name}: patched and stock launches ...", flush=True)
        results[name] = measure(CASES[name])

    print()
    print(f"Budget use on device cpu (simulated 256 MiB, --mem-fraction-static {FRACTION})")
    for name, rules in results.items():
        print()
        print(name)
        rows = []
        for rule, r in rules.items():
            over = r["used"] - r["budget"]
            rows.append(
                [
                    rule,
                    str(int(r["tokens"])),
                    human_bytes(r["weights"]),
                    human_bytes(r["target_pool"]),
                    human_bytes(r["draft_pool"]),
                    human_bytes(r["used"]),
                    f"{100 * r['use']:.2f} %",
                    f"{int(over):+d}",
                ]
            )
        print(
            table(
                [
                    "rule",
                    "tokens",
                    "weights",
                    "target KV",
                    "draft KV",
                    "used",
                    "used/budget",
                    "used-budget (B)",
                ],
                rows,
            )
        )

    print()
    print("Summary (tokens ratios; budget use; bytes over budget)")
    summary = []
    for name, rules in results.items():
        p, s, u = rules["patched"], rules["stock"], rules["upstream 0.5.14 (model)"]
        summary.append(
            [
                name,
                f"{p['tokens'] / s['tokens']:.3f}",
                f"{p['tokens'] / u['tokens']:.3f}" if u["tokens"] else "-",
                f"{100 * p['use']:.2f} %",
                f"{100 * s['use']:.2f} %",
                f"{100 * u['use']:.2f} %",
                human_bytes(s["used"] - s["budget"]),
            ]
        )
    print(
        table(
            [
                "case",
                "tokens patched/stock",
                "patched/0.5.14",
                "use patched",
                "use stock",
                "use 0.5.14",
                "stock overshoot",
            ],
            summary,
        )
    )


if __name__ == "__main__":
    main()
