#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): the bytes a follower fetches from a run published with `--by-direction`,
# against the plain patch of the same run published with and without `--context`
# (docs/sync.md, "Patches by direction").
#
#   tools/bench/by_direction.sh [FROM_STEP (3)] CKPT0 CKPT1 ... CKPTn
#
# Publishes the checkpoints in order to two runs on a file:// store in a temporary directory,
# `--by-direction` and `--context --by-direction`. After each step two followers of each run
# pull it: one keeps its directions, the other has them removed first, so it fetches the plain
# patch. Both must end bit for bit at every step. Prints the bytes fetched from step FROM_STEP
# on (the first steps of a run have no patch by direction, or no directions held yet) and how
# much less the follower by direction fetched.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
pulse=${PULSE_BIN:-$root/build/tools/pulse}
from=3
case "${1:-}" in ''|*[!0-9]*) ;; *) from=$1; shift ;; esac
[ $# -ge 2 ] || { echo "usage: by_direction.sh [FROM_STEP] CKPT0 CKPT1 ... (two checkpoints at least)" >&2; exit 2; }
[ -x "$pulse" ] || { echo "by_direction.sh: no pulse binary at $pulse (set PULSE_BIN)" >&2; exit 2; }
for c in "$@"; do [ -f "$c" ] || { echo "by_direction.sh: no checkpoint $c" >&2; exit 2; }; done

work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-bydir.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$pulse" keygen "$work/tr" >/dev/null
fetched() { sed -n 's/.*applied sync-patch, [0-9]* changes, \([0-9]*\) bytes fetched.*/\1/p' "$1" | tail -1; }

# run NAME [--context]: publish every checkpoint; the two followers' byte sums into NAME.sum
run() {
  local name=$1 step=0 a b sa=0 sb=0
  shift
  local store="file://$work/$name.store"
  for c in "${ckpts[@]}"; do
    "$pulse" publish --store "$store" --run r --key "$work/tr.key" --state "$work/$name.pub" --by-direction "$@" \
      --step "$step" "$c" >/dev/null
    "$pulse" pull --store "$store" --run r --trust "$work/tr.pub" --state "$work/$name.f1" \
      --weights "$work/$name.w1" >"$work/out1"
    rm -f "$work/$name.f2/directions"
    "$pulse" pull --store "$store" --run r --trust "$work/tr.pub" --state "$work/$name.f2" \
      --weights "$work/$name.w2" >"$work/out2"
    cmp -s "$work/$name.w1" "$c" && cmp -s "$work/$name.w2" "$c" \
      || { echo "by_direction.sh: a follower of $name differs from $c" >&2; exit 1; }
    if [ "$step" -ge "$from" ]; then
      a=$(fetched "$work/out1") b=$(fetched "$work/out2")
      sa=$((sa + a)) sb=$((sb + b))
    fi
    step=$((step + 1))
  done
  echo "$sa $sb" >"$work/$name.sum"
}
ckpts=("$@")
run plain
run context --context
read -r d4 p4 <"$work/plain.sum"
read -r d5 p5 <"$work/context.sum"
less() { python3 -c "import sys; print('%.1f %%' % (100 * (1 - int(sys.argv[1]) / int(sys.argv[2]))))" "$1" "$2"; }
echo "steps $from to $(( ${#ckpts[@]} - 1 )), bytes fetched (records and objects):"
echo "  by direction, beside format 4: $d4; the plain format-4 patches: $p4 ($(less "$d4" "$p4") less)"
echo "  by direction, beside format 5: $d5; the plain format-5 patches: $p5 ($(less "$d5" "$p5") less)"
