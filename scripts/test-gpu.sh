#!/usr/bin/env bash
# GPU runner suite: needs CUDA and the full sglang 0.5.13.post1 stack in the Python it runs
# (pip install "sglang==0.5.13.post1" -e ".[test]"). Launches real servers one at a time.
#
#   SPECINIT_GPU_PROFILE=full|small            model set (see test/harness/gpu_cases.py)
#   SPECINIT_GPU_<CASE>_TARGET / _DRAFT / _TP  per-case model overrides
#   SPECINIT_GPU_MEM_FRACTION                  --mem-fraction-static (default 0.9)
#   SPECINIT_GPU_OUT_DIR                       JUnit report and server logs (gpu-test-results)
#   HF_TOKEN                                   for gated checkpoints (meta-llama/*)
#
# Fails when pytest fails and also when no case ran (everything skipped: no CUDA, no
# sgl_kernel, too few GPUs); the summary lists each case with its outcome and skip reason.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
OUT_DIR=${SPECINIT_GPU_OUT_DIR:-gpu-test-results}
# FlashInfer's JIT runs `ninja` by name: the interpreter's own bin/ (a venv) goes first on PATH.
if ! BIN_DIR=$("$PYTHON" -c 'import os, sys; print(os.path.dirname(sys.executable))'); then
  echo "[test-gpu] cannot run $PYTHON" >&2
  exit 1
fi
export PATH="$BIN_DIR:$PATH"
mkdir -p "$OUT_DIR"
rm -f "$OUT_DIR/junit.xml"
"$PYTHON" -m pytest -p no:cacheprovider -m gpu test/gpu \
  --junitxml="$OUT_DIR/junit.xml" --basetemp="$OUT_DIR/cases" -rs "$@"
rc=$?
PYTHONPATH="test${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m harness.gpu_summary "$OUT_DIR/junit.xml" --pytest-exit-code "$rc"
