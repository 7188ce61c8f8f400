# SPDX-License-Identifier: Apache-2.0
# The shared opening of the three-trainer round tests (rounds.sh, reduce.sh, gate.sh): a store
# (file:// in a temporary directory, or the test RGW for mode s3, else exit 77), P (pulse with a
# timeout), G (locogen.py), and three trainer keys t1..t3 trusted through trust/.
#
# usage: . lib.sh MODE TAG LOCOGEN_PY
#   sets work (the current directory from then on), store, fail, ok, P, py, G, node, order
#   (the trainers' numbers in node-id order: the order of the mean and of locogen.py's arguments).
loco_mode=$1 loco_tag=$2
gen=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
loco_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${PULSE_BIN:?PULSE_BIN must name the pulse binary (meson test sets it)}"
if [ "$loco_mode" = s3 ]; then
  if [ -z "${PULSE_RGW_ENV:-}" ] || [ ! -f "${PULSE_RGW_ENV:-}" ]; then
    echo "SKIP: PULSE_RGW_ENV is not set to an RGW env file (scripts/test.sh starts one; docs/testing-s3.md)"
    exit 77
  fi
  # shellcheck source=../s3/lib.sh
  . "$loco_here/../s3/lib.sh"   # work, prefix, bucket, fail, ok, cleanup trap
  store="s3://$bucket/$prefix"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-$loco_tag.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  fail() { echo "FAIL: $*" >&2; exit 1; }
  ok() { echo "ok   $*"; }
  store="file://$work/store"
fi
cd "$work"
P() { timeout 120 "$PULSE_BIN" "$@"; }
py=$(python3 -c 'import sys; print(sys.executable)')   # once: a pyenv shim costs seconds per call
G() { "$py" "$gen" "$@"; }

mkdir trust
for k in 1 2 3; do
  P keygen --comment "t$k" "t$k" >/dev/null
  cp "t$k.pub" trust/
done
node() { awk '{print $2}' "t$1.pub"; }
order=$(for k in 1 2 3; do echo "$(node $k) $k"; done | sort | awk '{print $2}' | tr '\n' ' ')
