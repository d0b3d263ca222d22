#!/usr/bin/env bash
# Builds the CPU development environment in .venv (idempotent; a rebuilt tree takes seconds).
#
# sglang 0.5.13.post1 pins a CUDA torch==2.11.0. We install it with --no-deps next to the
# torch 2.14.1 / torchvision 0.29.1 pair that loads on a GPU-less machine without edits
# (see ../shared/docs/cpu-testing.md, variant B) and pin every other package in
# requirements/cpu-dev.lock so that CI and every developer get the same versions.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
SGLANG_VERSION=0.5.13.post1
stamp_inputs=$(cat requirements/cpu-dev.lock pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
stamp_file=$VENV/.specinit-stamp

if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp_inputs" ]; then
  echo "[setup] .venv is up to date"
  exit 0
fi

start=$(date +%s)
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q -r requirements/cpu-dev.lock
"$VENV/bin/pip" install -q --no-deps "sglang==$SGLANG_VERSION"
"$VENV/bin/pip" install -q --no-deps -e .
echo "$stamp_inputs" > "$stamp_file"
echo "[setup] built .venv in $(( $(date +%s) - start ))s"
