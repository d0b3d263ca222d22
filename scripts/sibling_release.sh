#!/usr/bin/env bash
# Runs a pytest target against another sglang release of a served API generation, without a
# venv of its own: the release's wheel, unpacked, goes FIRST on PYTHONPATH over the venv of a
# release of the same generation, so `import sglang` and `importlib.metadata.version("sglang")`
# (hence sglang_specinit.compat and harness.launch.sglang_release) both see the sibling. Meant
# for the cheap checks (hook targets, required attributes, signatures); the sibling's own
# dependency pins are not installed, the generation venv's are used.
#
#   bash scripts/sibling_release.sh RELEASE VENV PYTEST_ARGS...
#
#   bash scripts/sibling_release.sh 0.5.21 .venv-sglang0522 \
#       test/sglang_0_5_23/test_adapter_signatures.py
#   bash scripts/sibling_release.sh 0.5.18 .venv-sglang0520 test/sglang_0_5_23   # its row's files
#
# What it does, each step skipped when its result is already there:
#   1. `pip download --no-deps sglang==RELEASE` (the venv's own pip, the registry it is set up
#      with) into .cache/wheels/;
#   2. unzips it into .cache/sglang-RELEASE/ (the wheel's sglang/ and its dist-info);
#   3. checks that the venv's python, with that directory first on PYTHONPATH, resolves
#      `import sglang` to the unpacked RELEASE (its sglang/_version.py) and reads RELEASE from
#      the package metadata (else it stops: exit 3);
#   4. runs `VENV/bin/python -m pytest -p no:cacheprovider PYTEST_ARGS...` the same way and
#      exits with pytest's code.
# Each step's wall time is printed ([sibling] lines). .cache/ is git-ignored; delete
# .cache/sglang-RELEASE to unpack again.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 3 ]; then
  echo "usage: bash scripts/sibling_release.sh RELEASE VENV PYTEST_ARGS..." >&2
  echo "  e.g. bash scripts/sibling_release.sh 0.5.21 .venv-sglang0522 test/sglang_0_5_23" >&2
  exit 2
fi
release=$1 venv=$2
shift 2
python="$venv/bin/python"
if [ ! -x "$python" ]; then
  echo "[sibling] $venv has no bin/python: build it first (bash scripts/setup.sh)" >&2
  exit 2
fi

wheels=.cache/wheels
unpacked=.cache/sglang-$release
now() { date +%s.%N; }
took() { printf '%.1f' "$(echo "$(now) - $1" | bc)"; }

step=$(now)
wheel=$(ls "$wheels"/sglang-"$release"-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  mkdir -p "$wheels"
  "$python" -m pip download -q --no-deps --only-binary=:all: "sglang==$release" -d "$wheels"
  wheel=$(ls "$wheels"/sglang-"$release"-*.whl | head -n 1)
fi
echo "[sibling] wheel $wheel ($(took "$step") s)"

step=$(now)
if [ "$(cat "$unpacked/.specinit-wheel" 2>/dev/null || true)" != "$(basename "$wheel")" ]; then
  rm -rf "$unpacked"
  mkdir -p "$unpacked"
  "$python" -m zipfile -e "$wheel" "$unpacked"
  basename "$wheel" > "$unpacked/.specinit-wheel"
fi
echo "[sibling] unpacked into $unpacked ($(took "$step") s)"

export PYTHONPATH="$PWD/$unpacked${PYTHONPATH:+:$PYTHONPATH}"
step=$(now)
"$python" - "$release" "$venv" "$PWD/$unpacked" <<'EOF' || exit 3
# Without importing sglang (a first import compiles the unpacked tree, ~30 s): the module
# `import sglang` resolves to, the version that package's own _version.py defines (what
# sglang.__version__ imports), and the package metadata.
import importlib.util
import runpy
import sys
from importlib.metadata import version
from pathlib import Path

release, venv, unpacked = sys.argv[1:]
origin = Path(importlib.util.find_spec("sglang").origin)
defined = runpy.run_path(str(origin.parent / "_version.py"))["__version__"]
seen = {"metadata": version("sglang"), "import": defined}
if set(seen.values()) != {release} or not origin.is_relative_to(unpacked):
    sys.exit(f"[sibling] wanted sglang {release} from {unpacked} over {venv}: {seen}, {origin}")
print(f"[sibling] sglang {release} (metadata and import) from {origin} over {venv}")
EOF
echo "[sibling] checked ($(took "$step") s)"

step=$(now)
rc=0
"$python" -m pytest -p no:cacheprovider "$@" || rc=$?
echo "[sibling] pytest exited $rc ($(took "$step") s)"
exit "$rc"
