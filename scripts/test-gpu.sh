#!/usr/bin/env bash
# GPU runner suite: needs CUDA and the full sglang 0.5.13.post1 stack in the current Python
# (pip install "sglang==0.5.13.post1" -e ".[test]"). Launches real servers; model choices via
# SPECINIT_GPU_<CASE>_TARGET / _DRAFT / _TP (see test/gpu/test_gpu_servers.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
"$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device")'
exec "$PYTHON" -m pytest -q -m gpu test/gpu "$@"
