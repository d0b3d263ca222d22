#!/usr/bin/env bash
# Sets up the CPU environment if needed, then runs lint and the whole CPU test suite:
#   1. .venv (sglang 0.5.13.post1): everything under test/ but the per-release folders
#      test/sglang_0_5_1x / _2x (their conftests collect nothing under another release);
#   2. .venv-sglang0523 (sglang 0.5.23): test/sglang_0_5_23;
#   3. the other served releases, each in its own environment, in two lanes side by side:
#        0.5.20 (test/sglang_0_5_20), 0.5.16's - |  0.5.14 (test/sglang_0_5_14), 0.5.15 (its
#        0.5.19's wheels over it (signature     |  checks), 0.5.15.post1's wheel over it (the
#        and planner checks), 0.5.21            |  same checks), 0.5.22 (test/sglang_0_5_22)
#        (test/sglang_0_5_21)                   |
#      (skipped when arguments select tests, which then run in .venv only).
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

# Each lane runs its suites one after another; a suite's output is kept in its own log and
# printed when its lane is done, so the two lanes' lines do not interleave.
logs=$(mktemp -d)
suite() {  # name python args...: one suite into $logs/name.log; its code into $logs/name.rc
  local name=$1 rc=0
  shift
  { echo "[test] $name"; run_pytest "$@"; } >"$logs/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$logs/$name.rc"
}
sibling() {  # name release venv args...: a release's wheel over its generation's venv
  local name=$1 rc=0
  shift
  { echo "[test] $name"; bash scripts/sibling_release.sh "$@"; } >"$logs/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$logs/$name.rc"
}
(
  suite "sglang-0.5.20" .venv-sglang0520/bin/python test/sglang_0_5_20
  sibling "sglang-0.5.19-checks" 0.5.19 .venv-sglang0520 -q \
    test/sglang_0_5_20/test_adapter_signatures.py test/sglang_0_5_20/test_planner_0520.py
  sibling "sglang-0.5.18-checks" 0.5.18 .venv-sglang0520 -q \
    test/sglang_0_5_20/test_adapter_signatures.py test/sglang_0_5_20/test_planner_0520.py
  sibling "sglang-0.5.17-checks" 0.5.17 .venv-sglang0520 -q \
    test/sglang_0_5_20/test_adapter_signatures.py test/sglang_0_5_20/test_planner_0520.py
  sibling "sglang-0.5.16-checks" 0.5.16 .venv-sglang0520 -q \
    test/sglang_0_5_20/test_adapter_signatures.py test/sglang_0_5_20/test_planner_0520.py
  suite "sglang-0.5.21" .venv-sglang0521/bin/python test/sglang_0_5_21
) &
lane1=$!
(
  suite "sglang-0.5.14" .venv-sglang0514/bin/python test/sglang_0_5_14
  suite "sglang-0.5.15" .venv-sglang0515/bin/python test/sglang_0_5_14 -m "not cpu_engine"
  sibling "sglang-0.5.15.post1-checks" 0.5.15.post1 .venv-sglang0515 -q test/sglang_0_5_14 \
    -m "not cpu_engine"
  suite "sglang-0.5.22" .venv-sglang0522/bin/python test/sglang_0_5_22
) &
lane2=$!
wait "$lane1" "$lane2" || true
for name in sglang-0.5.20 sglang-0.5.19-checks sglang-0.5.18-checks \
  sglang-0.5.17-checks sglang-0.5.16-checks sglang-0.5.21 sglang-0.5.14 sglang-0.5.15 sglang-0.5.15.post1-checks \
  sglang-0.5.22; do
  cat "$logs/$name.log"
  code=$(cat "$logs/$name.rc" 2>/dev/null || echo 1)
  [ "$code" -eq 0 ] || rc=$code
done
rm -rf "$logs"
exit "$rc"
