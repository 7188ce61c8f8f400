#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# PULSELoCo's --reduce-gate (docs/loco.md): three trainer processes per round; every round all three
# hold the same theta_{r+1} and momentum bits, and locogen.py verify-gate recomputes theta_{r+1} and
# every trainer's e_new independently (the owners' gate on the mean, the withheld sums in the owners'
# e: conservation). Also: BF16 values, and --reduce-gate with momentum refused before anything moves.
#
# usage: gate.sh file|s3 LOCOGEN_PY   (s3: the test RGW named by PULSE_RGW_ENV, else skip)
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: gate.sh file|s3 LOCOGEN_PY" >&2; exit 2; }
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1" loco-rg "$2"
LR=1e-6 H=8 CUT=1024

G init theta0.safetensors 17
for k in 1 2 3; do P loco init --state "s$k" --global theta0.safetensors >/dev/null; done
sf() { printf '%s/%s-%012d.safetensors' "$1" "$2" "$3"; }

prepare() {   # prepare R: theta_local per trainer, and copies of the state files the round replaces
  local r=$1 k
  G local "$(sf s1 theta "$r")" "$((r * 10 + 7))" "$LR" "$H" l1-$r.safetensors l2-$r.safetensors l3-$r.safetensors
  for k in 1 2 3; do
    for w in theta e m; do cp "$(sf s$k $w "$r")" "pre-$w$k-$r.safetensors"; done
  done
}
run() {   # run R ARGS...: the three trainers' rounds at once
  local r=$1 k pids=() rc=0
  shift
  for k in 1 2 3; do
    P loco round --store "$store" --run rg --key "t$k.key" --trainers trust/t1.pub trust/t2.pub trust/t3.pub \
      --state "s$k" --local "l$k-$r.safetensors" --shard-elems $CUT --deadline 60 --reduce-gate "$@" \
      >"out$k-$r" 2>"err$k-$r" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ $rc != 0 ]; then cat err*-"$r" >&2; fail "round $r failed"; fi
}
same() {   # same R: identical theta_{R+1}, momentum and state lines on all three
  local n=$(($1 + 1)) k
  for k in 2 3; do
    cmp -s "$(sf s1 theta $n)" "$(sf s$k theta $n)" || fail "round $1: theta of t$k differs from t1's"
    cmp -s "$(sf s1 m $n)" "$(sf s$k m $n)" || fail "round $1: momentum of t$k differs from t1's"
    [ "$(P loco show --state s$k)" = "$(P loco show --state s1)" ] || fail "round $1: state line of t$k differs"
  done
  P loco show --state s1 | grep -q "^round $n " || fail "round $1: state did not advance"
}
verify() {   # verify R LR: locogen.py's recomputation; its counts against what the owners reported
  local r=$1 lr=$2 k args=() pub=0 held=0 line
  for k in $order; do args+=("l$k-$r.safetensors" "pre-e$k-$r.safetensors" "$(sf s$k e $((r + 1)))"); done
  line=$(G verify-gate "pre-theta1-$r.safetensors" "pre-m1-$r.safetensors" "$(sf s1 theta $((r + 1)))" $CUT "$lr" \
    "${args[@]}") || fail "round $r: $line"
  echo "  round $r: $line"
  for k in 1 2 3; do
    read -r p h < <(sed -n 's/.*reduce-gate: of the owned sums \([0-9]*\) published, \([0-9]*\) withheld.*/\1 \2/p' \
      "out$k-$r")
    [ -n "$p" ] || fail "round $r t$k: no reduce-gate line: $(cat "out$k-$r")"
    pub=$((pub + p)) held=$((held + h))
  done
  echo "$line" | grep -q "published $pub withheld $held;" ||
    fail "round $r: the owners reported $pub published, $held withheld; locogen.py: $line"
  [ "$held" -gt 0 ] && [ "$pub" -gt 0 ] || fail "round $r: $pub published, $held withheld (both should be > 0)"
}

# Round 0: plain averaging from e = 0.
prepare 0
run 0
same 0
verify 0 1
ok "round 0: identical bits on all three; theta_1 and e_1 as recomputed; withheld sums in the owners' e"

# Round 1: outer lr 0.7, starting from the e that round 0's owners carried the withheld sums in.
prepare 1
run 1 --outer-lr 0.7
same 1
verify 1 0.7
ok "round 1: outer lr 0.7 from non-zero e: identical bits, recomputed bit for bit, conservation"

# Round 2: BF16 values (the sums are not BF16 numbers; the gate works on them the same way).
prepare 2
run 2 --values bf16
same 2
ok "round 2: BF16 values, identical bits on all three"

# Outer momentum is refused with one clear line, before anything is published or changed.
prepare 3
before=$(P loco show --state s1)
P loco round --store "$store" --run rg --key t1.key --trainers trust --state s1 --local l1-3.safetensors \
  --reduce-gate --momentum 0.9 >out 2>err && fail "--reduce-gate with momentum 0.9 ran"
grep -q "needs outer momentum 0" err || fail "momentum: $(cat err)"
[ "$(wc -l <err)" = 1 ] || fail "momentum: more than one line: $(cat err)"
[ "$(P loco show --state s1)" = "$before" ] || fail "momentum: the state changed"
ok "--reduce-gate with outer momentum refused: $(cat err)"
ok "all"
