#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): bytes each trainer downloads per PULSELoCo round, all-gather against
# reduce-scatter, for 2, 4 and 8 trainers, through real rounds (`pulse loco sim --store-dir`: the
# built-in least-squares objective, real Adam gradients on each trainer's own data, every trainer's
# pulse_loco_round in its own thread against a file:// store). Prints a markdown table.
#
#   tools/bench/loco-rs.sh [ROUNDS (4)] [extra pulse loco sim options, e.g. --values bf16]
#
# Defaults: W 256 x 1024 (262 144 weights), shards of 8192 elements (32 ranges), H 8 at lr 1e-6.
# Every run also checks that the rounds through the store give the in-memory bits (sim exits 1 if not).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
pulse=${PULSE_BIN:-$root/build/tools/pulse}
rounds=${1:-4}
shift || true
[ -x "$pulse" ] || { echo "loco-rs.sh: no pulse binary at $pulse (set PULSE_BIN)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-locors.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "| trainers | sent/trainer | dense | shard bytes | all-gather down (max) | reduce-scatter down (max) | all-gather / reduce-scatter |"
echo "|---|---|---|---|---|---|---|"
base=""
for t in 2 4 8; do
  for way in ag rs; do
    flag=()
    [ $way = rs ] && flag=(--reduce-scatter)
    "$pulse" loco sim -q --trainers $t --rounds "$rounds" --rows 256 --cols 1024 --shard-elems 8192 \
      --store-dir "$work/$t$way" "${flag[@]}" "$@" >"$work/out" || { cat "$work/out" >&2; exit 1; }
    grep -q "the same theta_{r+1} as in memory every round" "$work/out" || { cat "$work/out" >&2; exit 1; }
    read -r avg max < <(sed -n 's/^downloaded per trainer and round.*: \([0-9]*\) bytes on average, \([0-9]*\) at most/\1 \2/p' "$work/out")
    eval "${way}_avg=$avg ${way}_max=$max"
  done
  read -r sent dense sb < <(sed -n 's/^bytes per trainer per round: loco \([0-9]*\) (\([0-9]*\) entries, \([0-9.]*\)% dense.*/\2 \3 \1/p' "$work/out")
  [ -n "$base" ] || base=$rs_avg
  echo "| $t | $sent | $dense % | $sb | $ag_avg ($ag_max) | $rs_avg ($rs_max) | $(awk -v a="$rs_avg" -v b="$ag_avg" 'BEGIN { printf "%.2f", b / a }') |"
done
echo
echo "reduce-scatter bytes per trainer, 8 trainers / 2 trainers: $(awk -v a="$rs_avg" -v b="$base" 'BEGIN { printf "%.2f", a / b }') (target: within 1.5)"
