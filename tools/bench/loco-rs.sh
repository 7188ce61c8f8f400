#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): bytes each trainer downloads per PULSELoCo round, all-gather against
# reduce-scatter and reduce-gate (the reduce-scatter with the owners' gate), for 2, 4 and 8 trainers, through real rounds (`pulse loco sim --store-dir`: the
# built-in least-squares objective, real Adam gradients on each trainer's own data, every trainer's
# pulse_loco_round in its own thread against a file:// store). Prints a markdown table.
#
#   tools/bench/loco-rs.sh [ROUNDS (4)] [extra pulse loco sim options, e.g. --values bf16]
#
# Defaults: W 256 x 1024 (262 144 weights), shards of 8192 elements (32 ranges), H 8 at lr 1e-6.
# Every run also checks that the rounds through the store give the in-memory bits (sim exits 1 if not).
# The last columns: the reduce-gate's share of summed entries published, and the final loss gaps of
# the BF16 weights against dense DiLoCo (exact reduce-scatter = all-gather bits; reduce-gate).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
pulse=${PULSE_BIN:-$root/build/tools/pulse}
rounds=${1:-4}
shift || true
[ -x "$pulse" ] || { echo "loco-rs.sh: no pulse binary at $pulse (set PULSE_BIN)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-locors.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "| trainers | sent/trainer | dense | shard bytes | all-gather down (max) | reduce-scatter down (max) | reduce-gate down (max) | published sums | BF16 loss gap: exact / gate |"
echo "|---|---|---|---|---|---|---|---|---|"
base=""
for t in 2 4 8; do
  for way in ag rs rg; do
    flag=()
    [ $way = rs ] && flag=(--reduce-scatter)
    [ $way = rg ] && flag=(--reduce-gate)
    "$pulse" loco sim -q --trainers $t --rounds "$rounds" --rows 256 --cols 1024 --shard-elems 8192 \
      --store-dir "$work/$t$way" "${flag[@]}" "$@" >"$work/out" || { cat "$work/out" >&2; exit 1; }
    grep -q "the same theta_{r+1} as in memory every round" "$work/out" || { cat "$work/out" >&2; exit 1; }
    read -r avg max < <(sed -n 's/^downloaded per trainer and round.*: \([0-9]*\) bytes on average, \([0-9]*\) at most/\1 \2/p' "$work/out")
    gap=$(sed -n 's/^final loss of the bf16 weights: .*= \([-+0-9.]*%\)$/\1/p' "$work/out")
    eval "${way}_avg=$avg ${way}_max=$max ${way}_gap=$gap"
    [ $way = rg ] && pub=$(sed -n 's/^reduce-gate: .*(\([0-9.]*%\)).*/\1/p' "$work/out")
  done
  read -r sent dense sb < <(sed -n 's/^bytes per trainer per round: loco \([0-9]*\) (\([0-9]*\) entries, \([0-9.]*\)% dense.*/\2 \3 \1/p' "$work/out")
  [ -n "$base" ] || { base=$rs_avg; gbase=$rg_avg; }
  echo "| $t | $sent | $dense % | $sb | $ag_avg ($ag_max) | $rs_avg ($rs_max) | $rg_avg ($rg_max) | $pub | $rs_gap / $rg_gap |"
done
echo
echo "bytes per trainer, 8 trainers / 2 trainers: reduce-scatter $(awk -v a="$rs_avg" -v b="$base" 'BEGIN { printf "%.2f", a / b }')," \
  "reduce-gate $(awk -v a="$rg_avg" -v b="$gbase" 'BEGIN { printf "%.2f", a / b }') (target: within 1.5)"
