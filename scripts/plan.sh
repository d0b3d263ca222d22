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
# sglang 0.5.23's pool code imports sgl_kernel, which has no CPU build; on this GPU-less
# machine the project's named CPU stand-in (test/harness/cpu_doubles/sgl_kernel_stub: import
# only, the planner runs no kernel) is put on the path. A GPU host with sglang installed has the real one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >&2
case "${SPECINIT_SGLANG:-0.5.23}" in
  0.5.13*) exec .venv/bin/sglang-specinit plan "$@" ;;
  0.5.23)
    if .venv-sglang0523/bin/python -c 'import sgl_kernel' 2>/dev/null; then
      exec .venv-sglang0523/bin/sglang-specinit plan "$@"
    fi
    PYTHONPATH="$PWD/test/harness/cpu_doubles/sgl_kernel_stub${PYTHONPATH:+:$PYTHONPATH}" \
      exec .venv-sglang0523/bin/sglang-specinit plan "$@"
    ;;
  *) echo "scripts/plan.sh: SPECINIT_SGLANG must be 0.5.23 or 0.5.13" >&2; exit 2 ;;
esac
