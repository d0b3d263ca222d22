#!/usr/bin/env bash
# Sets up the environment if needed, then runs the offline planner (default: the shipped
# llama31-8b-eagle3 example on an H100-80GB). Extra arguments go to `sglang-specinit plan`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >&2
exec .venv/bin/sglang-specinit plan "$@"
