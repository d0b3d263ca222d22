#!/usr/bin/env bash
# GPU runner suite: needs CUDA and the full stack of sglang 0.5.13.post1 or 0.5.23 in the Python
# it runs (pip install "sglang==0.5.23" -e ".[test]"; the same cases run on the release it finds).
# Launches real servers one at a time.
#
#   bash scripts/test-gpu.sh            the full suite of the selected profile
#   bash scripts/test-gpu.sh --dry-run  no GPU needed: one JSON line per server the suite would
#                                       start on the installed release (case, variant, argv, env),
#                                       each argv parsed by that release's own ServerArgs parser and
#                                       each env checked for CPU test doubles; exit 1 in one line if
#                                       one fails (harness/gpu/dry_run.py)
#   bash scripts/test-gpu.sh --smoke    one EAGLE3 case, plugin on against stock, from local
#                                       checkpoints (SPECINIT_GPU_MODEL_DIR): about 10-15 min warm
#                                       on one 80 GB GPU (an estimate, not measured); its timeout
#                                       is sized from its launches (time_budget.py)
#
#   SPECINIT_GPU_PROFILE=full|small            model set (see test/harness/gpu/gpu_cases.py)
#   SPECINIT_GPU_MODEL_DIR                     local checkpoints: <dir>/<org>/<name> or <dir>/<name>
#   SPECINIT_GPU_<CASE>_TARGET / _DRAFT / _TP  per-case model overrides
#   SPECINIT_GPU_MEM_FRACTION                  --mem-fraction-static (default 0.9)
#   SPECINIT_GPU_STOCK_MEM_FRACTION            both servers' fraction when stock OOMs at f
#                                              (default f - 0.1; the OOM is a result of its own)
#   SPECINIT_GPU_DETERMINISTIC=0               without --enable-deterministic-inference
#   SPECINIT_GPU_TEST_TIMEOUT_S                every test's timeout (default: each test's own,
#                                              sized from its launches: harness/gpu/time_budget.py)
#   SPECINIT_GPU_STARTUP_TIMEOUT_S             one launch until healthy (default 1800 s for the
#                                              first launch, with the kernels' JIT; 600 s after;
#                                              estimates until measured)
#   SPECINIT_GPU_MEMORY_WAIT_S                 device wait before a launch (default 300; smoke 120)
#   SPECINIT_GPU_OUT_DIR                       JUnit report, server logs and memory reports
#                                              (gpu-test-results; cases/ is this run's only)
#   SPECINIT_GPU_SKIP_PREFLIGHT=1              skip the driver/glibc check (CPU self-test)
#   HF_TOKEN                                   for gated checkpoints (meta-llama/*)
#
# Fails when the preflight fails (before anything runs), when pytest fails, and when no case
# ran (everything skipped: no CUDA, no sgl_kernel, too few GPUs); the summary lists each case
# with its outcome and skip reason. A test that hangs fails at its timeout (its servers are
# torn down and the JUnit report is still written).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
OUT_DIR=${SPECINIT_GPU_OUT_DIR:-gpu-test-results}
SMOKE=0
DRY_RUN=0
if [ "${1:-}" = "--smoke" ]; then
  SMOKE=1
  shift
elif [ "${1:-}" = "--dry-run" ]; then
  DRY_RUN=1
  shift
fi
HARNESS_PATH="$PWD/test${PYTHONPATH:+:$PYTHONPATH}"
if [ "$DRY_RUN" = 1 ]; then
  # No driver, no CUDA, no model: the suite's commands and environments, checked.
  PYTHONPATH="$HARNESS_PATH" exec "$PYTHON" -m harness.gpu.dry_run
fi
# The wheels' hard requirements, in one line, before anything else happens.
if [ "${SPECINIT_GPU_SKIP_PREFLIGHT:-0}" != "1" ]; then
  python3 test/harness/gpu/gpu_preflight.py || exit 1
fi
# FlashInfer's JIT runs `ninja` by name: the interpreter's own bin/ (a venv) goes first on PATH.
if ! BIN_DIR=$("$PYTHON" -c 'import os, sys; print(os.path.dirname(sys.executable))'); then
  echo "[test-gpu] cannot run $PYTHON" >&2
  exit 1
fi
export PATH="$BIN_DIR:$PATH"
# The release decides the cases' flags and log lines; any other one stops here, in one line.
if ! RELEASE=$(PYTHONPATH="$HARNESS_PATH" "$PYTHON" -m harness.gpu.gpu_release); then
  exit 1
fi
echo "[test-gpu] sglang $RELEASE"
# CUDA numbers devices like NVML only in PCI bus order (the suite waits on devices by NVML index).
export CUDA_DEVICE_ORDER=PCI_BUS_ID
SELECT=(test/gpu)
# Each test's own limit is set from its launches (test/gpu/conftest.py); this is the largest.
if ! TIMEOUT_S=$(PYTHONPATH="$HARNESS_PATH" "$PYTHON" -m harness.gpu.time_budget); then
  exit 1
fi
TIMEOUT_S=${SPECINIT_GPU_TEST_TIMEOUT_S:-$TIMEOUT_S}
if [ "$SMOKE" = 1 ]; then
  # Nothing downloads: the models must already be on local disk.
  export HF_HUB_OFFLINE=1
  if ! why=$(PYTHONPATH="$HARNESS_PATH" "$PYTHON" -m harness.gpu.gpu_cases); then
    echo "[test-gpu] cannot read the smoke's case (see above)" >&2
    exit 1
  fi
  if [ -n "$why" ]; then
    echo "[test-gpu] smoke: $why" >&2
    exit 1
  fi
  SELECT=("test/gpu/test_gpu_servers.py::test_case_fits_its_budget_and_matches_stock[eagle3]")
  export SPECINIT_GPU_MEMORY_WAIT_S=${SPECINIT_GPU_MEMORY_WAIT_S:-120}
  # Up to four launches (plugin and stock at f; both again at the stock fraction when stock
  # runs out of memory at f), each waiting for its devices, starting (the first with the
  # kernels' JIT), serving, tearing down (harness/gpu/time_budget.py).
  if ! TIMEOUT_S=$(PYTHONPATH="$HARNESS_PATH" "$PYTHON" -m harness.gpu.time_budget --smoke); then
    exit 1
  fi
fi
# This run's reports only: the summary and the workflow's memory report read these paths;
# results.jsonl / junit-partial.xml get each test's outcome as it ends (harness/gpu/gpu_summary.py).
mkdir -p "$OUT_DIR"
export SPECINIT_GPU_OUT_DIR="$OUT_DIR"
rm -rf "$OUT_DIR/junit.xml" "$OUT_DIR/cases" "$OUT_DIR/results.jsonl" "$OUT_DIR/junit-partial.xml"
# timeout-method=signal: the test fails with a traceback, its servers' context managers tear
# them down, and pytest goes on to the next test and writes the JUnit report.
cmd=("$PYTHON" -m pytest -p no:cacheprovider -m gpu "${SELECT[@]}"
  --timeout="$TIMEOUT_S" --timeout-method=signal
  --junitxml="$OUT_DIR/junit.xml" --basetemp="$OUT_DIR/cases" -rs "$@")
echo "[test-gpu] ${cmd[*]}"
"${cmd[@]}"
rc=$?
summary=()
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  summary=(--step-summary "$GITHUB_STEP_SUMMARY")
fi
PYTHONPATH="$HARNESS_PATH" "$PYTHON" -m harness.gpu.gpu_summary "$OUT_DIR/junit.xml" \
  --pytest-exit-code "$rc" --cases-dir "$OUT_DIR/cases" "${summary[@]}"
