#!/usr/bin/env bash
# Sets up the CPU environment if needed, then runs lint and the whole CPU test suite.
# GPU tests (marked `gpu`) skip here; on a GPU runner use scripts/test-gpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check python test benchmark
set +e
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "[test] pytest collected no tests: treating as a failure" >&2
  exit 1
fi
exit "$rc"
