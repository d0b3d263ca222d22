#!/usr/bin/env bash
# Sets up the CPU environment if needed, then runs lint and the whole CPU test suite:
#   1. .venv (sglang 0.5.13.post1): everything under test/ but test/sglang_0_5_2x (their
#      conftests collect nothing under another release);
#   2. .venv-sglang0523 (sglang 0.5.23): test/sglang_0_5_23;
#   3. .venv-sglang0522 (sglang 0.5.22): test/sglang_0_5_22
#      (2 and 3 are skipped when arguments select tests, which then run in .venv only).
# Tests marked ``slow`` run only with SPECINIT_TEST_SLOW=1 (see test/conftest.py).
# GPU tests (marked `gpu`) skip here; on a GPU runner use scripts/test-gpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check python test benchmark

run_pytest() {  # python, args...: pytest's exit code, with "collected nothing" as a failure
  local python=$1 rc
  shift
  set +e
  "$python" -m pytest -q -p no:cacheprovider "$@"
  rc=$?
  set -e
  if [ "$rc" -eq 5 ]; then
    echo "[test] pytest collected no tests: treating as a failure" >&2
    rc=1
  fi
  return "$rc"
}

rc=0
if [ "$#" -gt 0 ]; then
  run_pytest .venv/bin/python "$@" || rc=$?
  exit "$rc"
fi
# The whole suite. Almost every second is SGLang importing itself in a launch's processes, one
# core each, so two launches run side by side: the 0.5.13.post1 suite on two xdist workers (one
# test file per worker: a file's module-scoped launches are shared by its tests), then the 0.5.23
# suite, which starts its launches two at a time (test/sglang_0_5_23/conftest.py).
run_pytest .venv/bin/python -n 2 --dist loadfile || rc=$?
echo "[test] sglang 0.5.23 suite (.venv-sglang0523)"
run_pytest .venv-sglang0523/bin/python test/sglang_0_5_23 || rc=$?
echo "[test] sglang 0.5.22 suite (.venv-sglang0522)"
run_pytest .venv-sglang0522/bin/python test/sglang_0_5_22 || rc=$?
exit "$rc"
