#!/usr/bin/env bash
# Writes every shipped example's `plan --json` (and text) in every served release's environment
# into OUT/<release>/<example>.{json,txt,rc}, so two trees' figures can be diffed byte for byte:
#   bash scripts/plan_snapshot.sh OUT [PYTHONPATH_ROOT]
# Releases without a venv of their own run their wheel over their generation's venv (as
# scripts/sibling_release.sh unpacks it into .cache/sglang-RELEASE).
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1 root=${2:-$PWD}
mkdir -p "$out"
examples=$(ls python/sglang_specinit/planner/examples | grep -v README)
snap() {  # release venv [sibling-dir]
  local release=$1 venv=$2 extra=${3:-} pp="$root/python"
  [ -n "$extra" ] && pp="$extra:$pp"
  mkdir -p "$out/$release"
  for ex in $examples; do
    PYTHONPATH="$pp" "$venv/bin/python" -m sglang_specinit.planner.cli plan --example "$ex" --json \
      >"$out/$release/$ex.json" 2>"$out/$release/$ex.err"
    echo $? >"$out/$release/$ex.rc"
    PYTHONPATH="$pp" "$venv/bin/python" -m sglang_specinit.planner.cli plan --example "$ex" \
      >"$out/$release/$ex.txt" 2>/dev/null
  done
}
snap 0.5.13.post1 .venv
snap 0.5.14 .venv-sglang0514
snap 0.5.15 .venv-sglang0515
snap 0.5.20 .venv-sglang0520
snap 0.5.21 .venv-sglang0521
snap 0.5.22 .venv-sglang0522
snap 0.5.23 .venv-sglang0523
for sib in 0.5.16:.venv-sglang0520 0.5.19:.venv-sglang0520 0.5.15.post1:.venv-sglang0515; do
  rel=${sib%%:*} venv=${sib#*:}
  if [ ! -d ".cache/sglang-$rel" ]; then
    bash scripts/sibling_release.sh "$rel" "$venv" --co -q test/test_version_guard.py >/dev/null 2>&1
  fi
  [ -d ".cache/sglang-$rel" ] && snap "$rel" "$venv" "$PWD/.cache/sglang-$rel"
done
echo "[snapshot] $out"
