#!/usr/bin/env bash
# Writes every shipped example's `plan --json` (and text) in every served release's environment
# into OUT/<release>/<example>.{json,txt,rc} (scripts/plan_examples.py), so two trees' figures can
# be diffed byte for byte:
#   bash scripts/plan_snapshot.sh OUT [PYTHONPATH_ROOT]
# Every release of test/harness/releases.py; one without a venv of its own runs its wheel over
# its generation's venv (as scripts/sibling_release.sh unpacks it into .cache/sglang-RELEASE).
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1 root=${2:-$PWD}
mkdir -p "$out"
snap() {  # release venv [sibling-dir]: every example, one forked child per plan
  local release=$1 venv=$2 extra=${3:-} pp="$root/python"
  [ -n "$extra" ] && pp="$extra:$pp"
  PYTHONPATH="$pp" "$venv/bin/python" "$PWD/scripts/plan_examples.py" "$out/$release" 2>/dev/null
}
# Every served row of test/harness/releases.py (0.5.13 itself: no wheel is unpacked for it here).
for rel in $(.venv/bin/python test/harness/releases.py names); do
  [ "$rel" = 0.5.13 ] && continue
  read -r venv kind _paths <<<"$(.venv/bin/python test/harness/releases.py ci "$rel")"
  if [ "$kind" = venv ]; then
    snap "$rel" "$venv"
    continue
  fi
  if [ ! -d ".cache/sglang-$rel" ]; then
    bash scripts/sibling_release.sh "$rel" "$venv" --co -q test/test_version_guard.py >/dev/null 2>&1
  fi
  [ -d ".cache/sglang-$rel" ] && snap "$rel" "$venv" "$PWD/.cache/sglang-$rel"
done
echo "[snapshot] $out"
