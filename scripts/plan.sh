#!/usr/bin/env bash
# Sets up the environments if needed, then runs the offline planner (default: the shipped
# llama31-8b-eagle3 example on an H100-80GB). Extra arguments go to `sglang-specinit plan`.
#
#   SPECINIT_SGLANG=0.5.23 (default)  plan with sglang 0.5.23 (.venv-sglang0523): its own
#                                     server-args logic, pools priced by building them with
#                                     its pool code, stock 0.5.23's rule beside this package's
#   SPECINIT_SGLANG=0.5.13            plan with sglang 0.5.13.post1 (.venv): stock 0.5.13.post1
#                                     and upstream 0.5.14 beside this package's
#
# Either is the environment's own `sglang-specinit plan`, as a user runs it: on this GPU-less
# machine sglang 0.5.23's planner builds its pricing pools on cpu without sgl_kernel (see
# docs/planner.md), so nothing is added to the path.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only the environment this plan runs in is built (and .venv, which it layers over).
case "${SPECINIT_SGLANG:-0.5.23}" in
  0.5.13*) venv=.venv ;;
  0.5.23) venv=.venv-sglang0523 ;;
  *) echo "scripts/plan.sh: SPECINIT_SGLANG must be 0.5.23 or 0.5.13" >&2; exit 2 ;;
esac
bash scripts/setup.sh "$venv" >&2
exec "$venv/bin/sglang-specinit" plan "$@"
