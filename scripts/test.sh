#!/usr/bin/env bash
# Sets up the CPU environment if needed, then runs lint and the whole CPU test suite: every
# served release's row of test/harness/releases.py, in the CI step its row names. A row names
# its venv (or its wheel over its generation's venv: scripts/sibling_release.sh) and its
# generation suite (test/sglang_0_5_13 ... named after the adapter; test/shared where the row
# says); the suite's conftest collects the files the row lists.
#   1. .venv (sglang 0.5.13.post1): everything under test/ (test/unit, the 0.5.13 generation
#      suite, test/shared; the other generations' conftests collect nothing there);
#   2. 0.5.23 (.venv-sglang0523);
#   3. the other served releases (rows with `ci_queue`), two at a time, slowest first
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
# --durations: the slowest tests of each big suite, in the log (where CI time goes).
run_pytest .venv/bin/python -n 2 --dist loadfile --durations=15 || rc=$?

# One release: its row's venv (or its wheel over it) on its row's test paths.
release_args() {  # name: "venv venv|sibling paths..." from the release table
  .venv/bin/python test/harness/releases.py ci "$1"
}
echo "[test] sglang 0.5.23 suite"
read -r venv _kind paths <<<"$(release_args 0.5.23)"
# shellcheck disable=SC2086  # paths: several words
run_pytest "$venv/bin/python" --durations=15 $paths || rc=$?

# The queue runs two releases at a time, the slowest (own venv, Engine launches) first, so
# neither slot idles while the other works through a long release; a release's output is kept
# in its own log and printed when the queue is done, so two releases' lines do not interleave.
logs=$(mktemp -d)
release() {  # name: one release's suite into $logs/name.log; its code into $logs/name.rc
  local name=$1 rc=0 venv kind paths start
  read -r venv kind paths <<<"$(release_args "$name")"
  start=$(date +%s)
  {
    echo "[test] sglang $name ($kind $venv: $paths)"
    # shellcheck disable=SC2086
    if [ "$kind" = sibling ]; then
      bash scripts/sibling_release.sh "$name" "$venv" -q $paths
    else
      run_pytest "$venv/bin/python" $paths
    fi
  } >"$logs/$name.log" 2>&1 || rc=$?
  echo "[test] sglang $name: rc $rc in $(( $(date +%s) - start ))s" >>"$logs/$name.log"
  echo "$rc" >"$logs/$name.rc"
}
queue=$(.venv/bin/python test/harness/releases.py queue)
running=0
for name in $queue; do
  if [ "$running" -ge 2 ]; then
    wait -n || true
    running=$((running - 1))
  fi
  release "$name" &
  running=$((running + 1))
done
wait || true
for name in $queue; do  # a release that wrote no code failed before its suite ran
  cat "$logs/$name.log" 2>/dev/null || echo "[test] sglang $name: no log"
  code=$(cat "$logs/$name.rc" 2>/dev/null || echo 1)
  [ "$code" -eq 0 ] || rc=$code
done
rm -rf "$logs"
exit "$rc"
