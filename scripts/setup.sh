#!/usr/bin/env bash
# Builds the CPU development environments (idempotent: an up-to-date tree takes a second).
#
#   bash scripts/setup.sh                 every environment below (what the tests run)
#   bash scripts/setup.sh VENV [VENV ...] only those (and .venv, which the others layer over):
#                                         scripts/plan.sh builds just the one it plans with
#
#   .venv               sglang 0.5.13.post1 + this package (editable) + pinned test tools
#   .venv-sglang0514    sglang 0.5.14 (no deps) layered over .venv: the 0.5.14 adapter's
#                       tests (test/sglang_0_5_14) run in it
#   .venv-sglang05XX    one per requirements/cpu-dev-05XX.lock: that sglang release + the
#                       packages it needs in other versions (no deps) layered over .venv;
#                       test/harness/releases.py names the rows that run in each
#
# Each environment has its own stamp, a hash of what builds it (its lock, its build function,
# and for a layered one .venv's stamp): changing one release's lock rebuilds that venv only.
#
# sglang 0.5.13.post1 pins a CUDA torch==2.11.0. We install it with --no-deps next to the
# torch 2.14.1 / torchvision 0.29.1 pair that imports on a GPU-less machine without edits
# (../shared/docs/cpu-testing.md, variant B), and pin every other package in
# requirements/cpu-dev.lock so CI and every developer get the same versions.
set -euo pipefail
cd "$(dirname "$0")/.."
# One build at a time: two runs (scripts/plan.sh runs this too) would delete each other's venvs.
mkdir -p .cache
exec 9>.cache/setup.lock
flock 9

PYTHON=${PYTHON:-python3}
SGLANG_VERSION=0.5.13.post1
UPSTREAM_FIXED_VERSION=0.5.14

make_main_venv() {
  rm -rf .venv
  "$PYTHON" -m venv .venv
}

fill_main_venv() {
  .venv/bin/pip install -q -r requirements/cpu-dev.lock &&
  .venv/bin/pip install -q --no-deps "sglang==$SGLANG_VERSION" &&
  .venv/bin/pip install -q --no-deps -e .
}

build_upstream_venv() {
  # Only sglang 0.5.14 itself lives here; everything else is read from .venv through a .pth
  # appended after this venv's own site-packages, so 0.5.14 shadows 0.5.13.post1.
  rm -rf .venv-sglang0514
  "$PYTHON" -m venv .venv-sglang0514
  .venv-sglang0514/bin/pip install -q --no-deps "sglang==$UPSTREAM_FIXED_VERSION"
  .venv-sglang0514/bin/pip install -q --no-deps -e .
  local own main
  own=$(.venv-sglang0514/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  main=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$main" > "$own/zz-specinit-main-venv.pth"
}

build_layered_venv() {
  # build_layered_venv VENV LOCK. Same layering as .venv-sglang0514: this venv's own
  # site-packages (one sglang release and the few packages it pins differently) come first,
  # then .venv's through a .pth, so torch is shared instead of installed a second time
  # (~6 GB, ~3 min).
  local venv=$1 lock=$2 own main
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install -q --no-deps -r "$lock"
  "$venv/bin/pip" install -q --no-deps -e .
  own=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  main=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$main" > "$own/zz-specinit-main-venv.pth"
}

# Layered sglang releases: one venv per release lock, requirements/cpu-dev-05XX.lock ->
# .venv-sglang05XX (0.5.14's venv has no lock: only sglang itself is installed there).
declare -A LAYERED=()
for lock in requirements/cpu-dev-0*.lock; do
  release=${lock#requirements/cpu-dev-}
  LAYERED[.venv-sglang${release%.lock}]=$lock
done

hash_of() { sha256sum | cut -d' ' -f1; }

# What each environment is built from (its stamp).
stamp_of() {
  case "$1" in
    .venv)
      { cat requirements/cpu-dev.lock pyproject.toml; echo "$SGLANG_VERSION"
        declare -f make_main_venv fill_main_venv; } | hash_of ;;
    .venv-sglang0514)
      { stamp_of .venv; echo "$UPSTREAM_FIXED_VERSION"; declare -f build_upstream_venv; } \
        | hash_of ;;
    *)
      { stamp_of .venv; cat "${LAYERED[$1]}"; declare -f build_layered_venv; } | hash_of ;;
  esac
}

up_to_date() {
  [ -f "$1/.specinit-stamp" ] && [ "$(cat "$1/.specinit-stamp")" = "$(stamp_of "$1")" ]
}

# The environments asked for (default: all); .venv always, the others are layered over it.
wanted=(.venv)
if [ "$#" -eq 0 ]; then
  wanted+=(.venv-sglang0514 "${!LAYERED[@]}")
else
  for venv in "$@"; do
    case "$venv" in
      .venv) ;;
      .venv-sglang0514) wanted+=("$venv") ;;
      *)
        if [ -z "${LAYERED[$venv]+set}" ]; then
          echo "[setup] unknown environment $venv (known: .venv .venv-sglang0514 ${!LAYERED[*]})" >&2
          exit 2
        fi
        wanted+=("$venv") ;;
    esac
  done
fi
is_wanted() { local v; for v in "${wanted[@]}"; do [ "$v" = "$1" ] && return 0; done; return 1; }

stale=()
for venv in "${wanted[@]}"; do
  up_to_date "$venv" || stale+=("$venv")
done
if [ ${#stale[@]} -eq 0 ]; then
  echo "[setup] environments are up to date"
  exit 0
fi

start=$(date +%s)
fill_main=0
if ! up_to_date .venv; then
  # The layered venvs name .venv's site-packages (a .pth) and import from it only at run time:
  # create it, then fill it while they build beside it.
  make_main_venv
  fill_main=1
  # The layered venvs read .venv: rebuild them on top of the new one.
  rm -f .venv-sglang0514/.specinit-stamp
  for venv in "${!LAYERED[@]}"; do rm -f "$venv/.specinit-stamp"; done
fi
# The environments build side by side (pip is mostly single-threaded unpacking, and CI has
# two cores).
pids=()
if is_wanted .venv-sglang0514 && ! up_to_date .venv-sglang0514; then
  (build_upstream_venv && stamp_of .venv-sglang0514 > .venv-sglang0514/.specinit-stamp) &
  pids+=($!)
fi
for venv in "${!LAYERED[@]}"; do
  if is_wanted "$venv" && ! up_to_date "$venv"; then
    (
      step=$(date +%s)
      build_layered_venv "$venv" "${LAYERED[$venv]}"
      stamp_of "$venv" > "$venv/.specinit-stamp"
      echo "[setup] built $venv in $(( $(date +%s) - step ))s"
    ) &
    pids+=($!)
  fi
done
if [ "$fill_main" = 1 ]; then
  step=$(date +%s)
  fill_main_venv || { kill "${pids[@]}" 2>/dev/null; exit 1; }
  stamp_of .venv > .venv/.specinit-stamp
  echo "[setup] built .venv in $(( $(date +%s) - step ))s"
fi
for pid in "${pids[@]}"; do
  wait "$pid"
done
echo "[setup] environments ready in $(( $(date +%s) - start ))s"
