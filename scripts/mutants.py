"""Mutations of the product's behaviour, and the tests that must catch each one.

Each mutant replaces one snippet (found exactly once) under ``python/sglang_specinit`` in a copy
of ``python/`` and runs its test node ids in its venv; caught when pytest fails. Usage:
``mutants.py [--only NAME] [--root TREE] [--list] [--baseline]`` (~5 min on 2 idle cores).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PER_MUTANT_TIMEOUT_S = 1500


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # under python/sglang_specinit
    old: str
    new: str
    env: str  # the venv directory under the tree's root
    tests: tuple[str, ...]


_SIGNATURES = "test/sglang_0_5_23/test_adapter_signatures.py"
_EAGLE3_LAUNCH = "test/sglang_0_5_23/test_eagle3_launch.py"
_REFUSED = "test/shared/test_refused_launches.py::test_refused_launch_and_its_plan"
_BAD_INPUT = "test/shared/test_plan_bad_input.py::test_bad_input_exits_2_with_one_line"
_LAYOUT_TEST = (
    f"{_SIGNATURES}::test_the_draft_layout_fused_entries_sharding_and_dp_names_are_as_"
    "release_shims_says"
)


def _twins(name: str, file: str, change: tuple[str, str], test: str) -> tuple[Mutant, ...]:
    """One mutant on 0.5.13.post1 (``.venv``) and on 0.5.23, running the same shared test."""
    return tuple(
        Mutant(f"{name}-{tag}", file, *change, env, (test,))
        for tag, env in (("0513", ".venv"), ("0523", ".venv-sglang0523"))
    )


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "eagle3-without-draft-planned",
        "planner/preflight.py",
        'if args.speculative_algorithm == "EAGLE3" and not args.speculative_draft_model_path:',
        'if args.speculative_algorithm == "EAGLE-3" and not args.speculative_draft_model_path:',
        ".venv",
        (
            "test/shared/test_plan_verdicts.py::test_the_planner_gives_the_launch_verdict"
            "[sglang-eagle3-without-draft]",
        ),
    ),
    Mutant(
        "0523-malformed-config-traceback",
        "sglang_0_5_23/planner_replay.py",
        "            except config_errors() as e:  # resolution builds the launch's model configs",
        "            except ZeroDivisionError as e:",
        ".venv-sglang0523",
        (f"{_BAD_INPUT}[unsupported architecture]",),
    ),
    Mutant(
        "0513-stepless-draft-planned",
        "sglang_0_5_13/planner_replay.py",
        '_BACKENDS_NEEDING_A_DRAFT_STEP = ("triton", "flashinfer", "aiter")',
        "_BACKENDS_NEEDING_A_DRAFT_STEP = ()",
        ".venv",
        (f"{_REFUSED}[num-steps-0-topk-1]",),
    ),
    Mutant(
        "0513-draft-config-traceback",
        "dataclass_args/replay.py",
        "        except config_errors() as e:  # it builds the draft's model config",
        "        except KeyError as e:",
        ".venv",
        (f"{_BAD_INPUT}[draft heads zero]",),
    ),
    Mutant(
        "0523-bare-assert-refusal-says-nothing",
        "sglang_0_5_23/planner_replay.py",
        "why = str(e) or traceback.extract_tb(e.__traceback__)[-1].line",
        "why = str(e)",
        ".venv-sglang0523",
        (f"{_BAD_INPUT}[attention dp that does not split tp]",),
    ),
    *_twins(
        "report-partial-breakdown-traceback",
        "planner/report_cases.py",
        ("all(key in value for key in BAR_KEYS)", "all(key in value for key in BAR_KEYS[:2])"),
        f"{_BAD_INPUT}[report partial breakdown]",
    ),
    *_twins(
        "weights-summary-shape-traceback",
        "planner/weights.py",
        ("except (ValueError, AttributeError, TypeError) as e:", "except ValueError as e:"),
        f"{_BAD_INPUT}[weights summary not an object]",
    ),
    Mutant(
        "lfs-pointer-read-as-a-header",
        "planner/weights.py",
        "        if header_len > os.path.getsize(path) - 8:",
        "        if header_len > 1 << 62:",
        ".venv",
        (f"{_BAD_INPUT}[lfs pointer shard]",),
    ),
    *_twins(
        "config-zero-division-traceback",
        "planner/replay.py",
        ("KeyError, TypeError, OSError, ArithmeticError,", "KeyError, TypeError, OSError,"),
        f"{_BAD_INPUT}[heads zero]",
    ),
    *_twins(
        "fraction-refusal-text",
        "launch_checks.py",
        ("is outside (0, 1): it is the share", "is outside [0, 1]: it is the share"),
        "test/shared/test_plan_verdicts.py::"
        "test_the_planner_gives_the_launch_verdict[launcher-mem-fraction-1.5]",
    ),
    Mutant(
        "truncated-shard-not-refused",
        "launch_checks.py",
        "        if problem is not None:\n            raise LaunchCheckError(",
        "        if problem is None:\n            raise LaunchCheckError(",
        ".venv",
        (f"{_REFUSED}[truncated-draft-shard-1]",),
    ),
    Mutant(
        "0523-hook-reads-raw-fields",
        "sglang_0_5_23/launch_checks.py",
        "    cfg = resolving_view(server_args)\n",
        "    cfg = server_args\n",
        ".venv-sglang0523",
        (
            "test/sglang_0_5_23/test_fault_matrix_0523.py::test_0_5_23_hook_reads_what_resolution_decided",
        ),
    ),
    Mutant(
        "0522-lacks-attention-dp-names",
        "sglang_0_5_23/release_shims.py",
        '"kv_cache_sharding": True,\n                    "attention_dp_names": True}',
        '"kv_cache_sharding": True}',
        ".venv-sglang0522",
        (_LAYOUT_TEST,),
    ),
    Mutant(
        "0521-fused-entries-a-release-early",
        "sglang_0_5_23/release_shims.py",
        '"pp_spec": True, "deepseek_v4_pools": True}),',
        '"pp_spec": True, "deepseek_v4_pools": True, "fused_draft_entries": True}),',
        ".venv-sglang0521",
        (_LAYOUT_TEST,),
    ),
    Mutant(
        "0521-platform-facts-unfiltered",
        "sglang_0_5_23/release_shims.py",
        "    return {name: value for name, value in facts.items() if name in known}",
        "    return facts",
        ".venv-sglang0521",
        (f"{_SIGNATURES}::test_the_planner_hands_the_release_only_the_platform_facts_it_knows",),
    ),
    Mutant(
        "0520-no-config-bags",
        "sglang_0_5_23/release_shims.py",
        '("0.5.17", {"config_bags": True}),',
        '("0.5.17", {}),',
        ".venv-sglang0520",
        (f"{_SIGNATURES}::test_the_parallel_state_generation_is_as_release_shims_says",),
    ),
    Mutant(
        "0520-widths-not-at-publish",
        "sglang_0_5_23/release_shims.py",
        '("0.5.20", {"widths_at_publish": True}),',
        '("0.5.20", {}),',
        ".venv-sglang0520",
        (f"{_SIGNATURES}::test_the_parallel_state_generation_is_as_release_shims_says",),
    ),
    Mutant(
        "0515-not-served",
        "sglang_0_5_14/__init__.py",
        'releases=("0.5.14", "0.5.15", "0.5.15.post1"),',
        'releases=("0.5.14", "0.5.15.post1"),',
        ".venv-sglang0515",
        (
            "test/sglang_0_5_14/test_adapter_signatures.py::test_the_release_is_served_by_the_0_5_14_adapter",
        ),
    ),
    Mutant(
        "stock-column-label",
        "planner/columns.py",
        'stock.update({"release": plan.release, "rule": STOCK_RULE})',
        'stock.update({"release": "0.5.23", "rule": STOCK_RULE})',
        ".venv-sglang0522",
        (f"{_EAGLE3_LAUNCH}::test_plan_in_this_environment_equals_the_server",),
    ),
    Mutant(
        "pool-line-names-another-release",
        "sglang_0_5_23/scheduler.py",
        "headline = f\"KV pools on sglang {breakdown['sglang_version']}\"",
        'headline = "KV pools on sglang 0.5.23"',
        ".venv-sglang0522",
        (f"{_EAGLE3_LAUNCH}::test_the_engine_fills_the_budget",),
    ),
    *_twins(
        "no-rank-is-tightest",
        "rank_reports.py",
        ('"tightest_rank": above <= TIGHTEST_TOLERANCE_BYTES,', '"tightest_rank": above < 0,'),
        "test/shared/test_tp2_ranks.py::"
        "test_each_rank_sizes_and_fits_the_tightest_and_says_whether_it_is_the_tightest",
    ),
    Mutant(
        "eagle-bare-embedding-counted-as-draft",
        "planner/weights.py",
        '            stored = draft.tensor(name.removeprefix("model."))\n',
        "            pass\n",
        ".venv",
        (
            "test/unit/test_weights.py::test_separate_draft_split",
            "test/sglang_0_5_13/test_bad_inputs.py::"
            "test_fraction_below_minimum_viable_is_refused_with_a_suggestion",
        ),
    ),
)

BY_NAME = {m.name: m for m in MUTANTS}


def run(mutant: Mutant, root: Path, *, apply: bool = True) -> tuple[int, bool, str]:
    """Run ``mutant``'s tests on a mutated (``apply``) copy of ``root/python``: (pytest's exit
    code, caught: exit 1 with "failed" in the summary, not a fixture error or exit 2-4, summary)."""
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as tmp:
        python = Path(tmp) / "python"
        shutil.copytree(
            root / "python", python, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
        )
        path = python / "sglang_specinit" / mutant.file
        text = path.read_text()
        if text.count(mutant.old) != 1:
            raise ValueError(f"{mutant.name}: the snippet occurs {text.count(mutant.old)} times")
        if apply:
            path.write_text(text.replace(mutant.old, mutant.new))
        env = {
            **os.environ,
            "PYTHONPATH": str(python),
            "PYTHONDONTWRITEBYTECODE": "1",
            "SPECINIT_TEST_SLOW": os.environ.get("SPECINIT_TEST_SLOW", "0"),
        }
        argv = [
            str(root / mutant.env / "bin" / "python"), "-m", "pytest", "-x", "-q",
            "-p", "no:cacheprovider", *mutant.tests,
        ]  # fmt: skip
        done = subprocess.run(
            argv, cwd=root, env=env, capture_output=True, text=True, timeout=PER_MUTANT_TIMEOUT_S
        )
    lines = [ln for ln in done.stdout.strip().splitlines() if ln.strip()]
    summary = lines[-1] if lines else done.stderr.strip()[-200:]
    failed = done.returncode == 1 and " failed" in (lines[-1] if lines else "")
    first_error = next((ln for ln in lines if ln.startswith("E ")), "")
    return done.returncode, failed, summary + (f" | {first_error[:150]}" if first_error else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(BY_NAME), default=[])
    parser.add_argument("--root", type=Path, default=REPO, help="the tree whose tests run")
    parser.add_argument("--list", action="store_true")
    parser.add_argument(
        "--baseline", action="store_true", help="run each mutant's tests unmutated: must pass"
    )
    args = parser.parse_args(argv)
    root = args.root.resolve()
    chosen = [BY_NAME[n] for n in args.only] if args.only else list(MUTANTS)
    if args.list:
        for m in chosen:
            print(f"{m.name:<34} {m.env:<18} {' '.join(m.tests)}")
        return 0
    bad = 0
    for mutant in chosen:
        started = time.monotonic()
        code, failed, summary = run(mutant, root, apply=not args.baseline)
        if args.baseline:
            ok, verdict = code == 0, "passes" if code == 0 else f"FAILS UNMUTATED ({code})"
        else:
            ok = failed
            verdict = "caught" if ok else f"MISSED (pytest exit {code})"
            if code == 1 and not ok:
                verdict = "ERROR (not a catch)"
        bad += not ok
        seconds = time.monotonic() - started
        print(f"{mutant.name:<34} {verdict:<24} {seconds:6.0f} s  {summary}", flush=True)
    what = "fail unmutated" if args.baseline else "missed"
    print(f"{bad} of {len(chosen)} {what} ({root})")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
