#!/usr/bin/env bash
# Sets up the CPU environment if needed, then runs lint and the whole CPU test suite: every
# served release's row of test/harness/releases.py, in the CI lane its row names. A row names
# its venv (or its wheel over its generation's venv: scripts/sibling_release.sh) and its
# generation suite (test/sglang_0_5_13 ... named after the adapter; test/shared where the row
# says); the suite's conftest collects the files the row lists.
#   1. .venv (sglang 0.5.13.post1): everything under test/ (test/unit, the 0.5.13 generation
#      suite, test/shared; the other generations' conftests collect nothing there);
#   2. 0.5.23 (.venv-sglang0523);
#   3. the other served releases in two lanes side by side, each row in its `ci_lane`
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

# One release: its row's venv (or its wheel over it) on its row's test paths.
release_args() {  # name: "venv venv|sibling paths..." from the release table
  .venv/bin/python test/harness/releases.py ci "$1"
}
echo "[test] sglang 0.5.23 suite"
read -r venv _kind paths <<<"$(release_args 0.5.23)"
# shellcheck disable=SC2086  # paths: several words
run_pytest "$venv/bin/python" $paths || rc=$?

# Each lane runs its releases one after another; a release's output is kept in its own log and
# printed when both lanes are done, so the two lanes' lines do not interleave.
logs=$(mktemp -d)
release() {  # name: one release's suite into $logs/name.log; its code into $logs/name.rc
  local name=$1 rc=0 venv kind paths
  read -r venv kind paths <<<"$(release_args "$name")"
  {
    echo "[test] sglang $name ($kind $venv: $paths)"
    # shellcheck disable=SC2086
    if [ "$kind" = sibling ]; then
      bash scripts/sibling_release.sh "$name" "$venv" -q $paths
    else
      run_pytest "$venv/bin/python" $paths
    fi
  } >"$logs/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$logs/$name.rc"
}
lane1=$(.venv/bin/python test/harness/releases.py lane 1)
lane2=$(.venv/bin/python test/harness/releases.py lane 2)
lane() {  # releases...: one after another
  local name
  for name in "$@"; do release "$name"; done
}
# shellcheck disable=SC2086  # a lane: several names
lane $lane1 &
pid1=$!
# shellcheck disable=SC2086
lane $lane2 &
pid2=$!
wait "$pid1" "$pid2" || true
for log in "$logs"/*.log; do  # by release name
  cat "$log"
  code=$(cat "${log%.log}.rc" 2>/dev/null || echo 1)
  [ "$code" -eq 0 ] || rc=$code
done
rm -rf "$logs"
exit "$rc"
