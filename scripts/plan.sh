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
bash scripts/setup.sh >&2
case "${SPECINIT_SGLANG:-0.5.23}" in
  0.5.13*) exec .venv/bin/sglang-specinit plan "$@" ;;
  0.5.23) exec .venv-sglang0523/bin/sglang-specinit plan "$@" ;;
  *) echo "scripts/plan.sh: SPECINIT_SGLANG must be 0.5.23 or 0.5.13" >&2; exit 2 ;;
esac
