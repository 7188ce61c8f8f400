#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The default quorum (docs/loco.md "Quorum"): a majority of the last round's members, the same
# number on every honest trainer. Four trainers, no --quorum anywhere: t4's trusted key signs a
# shard over the bound (excluded), then t3 stops publishing (killed), then both stay gone; t1 and
# t2 go on round after round, bit-identical and recomputed independently; a reduce-scatter round
# run from copies of the same states without t3 and t4 gives the same bits.
#
# usage: quorum.sh file|s3 LOCO_FORGE LOCOGEN_PY   (s3: the test RGW named by PULSE_RGW_ENV, else skip)
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: quorum.sh file|s3 LOCO_FORGE LOCOGEN_PY" >&2; exit 2; }
forge=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1" loco-quorum "$3"
LR=1e-6 H=8
P keygen --comment t4 t4 >/dev/null
cp t4.pub trust/
order=$(for k in 1 2 3 4; do echo "$(node $k) $k"; done | sort | awk '{print $2}' | tr '\n' ' ')

G init theta0.safetensors 5
for k in 1 2 3 4; do P loco init --state "s$k" --global theta0.safetensors >/dev/null; done
th() { printf '%s/theta-%012d.safetensors' "$1" "$2"; }
ef() { printf '%s/e-%012d.safetensors' "$1" "$2"; }

prepare() {   # prepare R "TRAINERS": local updates from theta_R, copies of theta_R and e_R
  local r=$1 k outs=()
  for k in $2; do outs+=("l$k-$r.safetensors"); done
  G local "$(th s1 "$r")" "$((r * 10 + 1))" "$LR" "$H" "${outs[@]}"
  for k in $2; do
    cp "$(th s$k "$r")" "pre-theta$k-$r.safetensors"
    cp "$(ef s$k "$r")" "pre-e$k-$r.safetensors"
  done
}
# run R "TRAINERS" ARGS...: the trainers' rounds as concurrent processes, the default quorum
run() {
  local r=$1 who=$2 k pids=() rc=0
  shift 2
  for k in $who; do
    P loco round --store "$store" --run loco --key "t$k.key" --trust trust --state "s$k" \
      --local "l$k-$r.safetensors" -o "new$k-$r.safetensors" "$@" >"out$k-$r" 2>"err$k-$r" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ $rc != 0 ]; then cat err*-"$r" >&2; fail "round $r failed"; fi
}
same() {   # same R "TRAINERS": identical theta_{R+1}, momentum and state line
  local r=$1 who=($2) k n
  n=$(printf %012d $(($1 + 1)))
  for k in "${who[@]:1}"; do
    cmp -s "s${who[0]}/theta-$n.safetensors" "s$k/theta-$n.safetensors" || fail "round $r: theta differs (t${who[0]}, t$k)"
    cmp -s "s${who[0]}/m-$n.safetensors" "s$k/m-$n.safetensors" || fail "round $r: momentum differs"
    [ "$(P loco show --state "s${who[0]}")" = "$(P loco show --state "s$k")" ] || fail "round $r: state ids differ"
  done
  P loco show --state "s${who[0]}" | grep -q "^round $(($1 + 1)) " || fail "round $r: state did not advance"
}
verify() {   # verify R "TRAINERS": locogen.py recomputes the plain mean of exactly these trainers
  local r=$1 who=" $2 " k args=() first=""
  for k in $order; do
    case $who in *" $k "*) ;; *) continue ;; esac
    [ -n "$first" ] || first=$k
    args+=("l$k-$r.safetensors" "pre-e$k-$r.safetensors" "$(ef "s$k" $((r + 1)))" 1)
  done
  G verify "pre-theta$first-$r.safetensors" "$(th "s$first" $((r + 1)))" "${args[@]}" >/dev/null
}

# Round 0: all four; the default quorum (a majority of the four trainers) is met by everyone.
prepare 0 "1 2 3 4"
run 0 "1 2 3 4" --deadline 60
same 0 "1 2 3 4"
verify 0 "1 2 3 4"
grep -q "4 of 4 trainers included" out1-0 || fail "round 0: $(cat out1-0)"
ok "round 0: four trainers, identical, recomputed"

# Round 1: t4's trusted key signs a shard with a value over the bound (t4's process never runs).
# Every honest trainer excludes it; 3 valid of 4 is a majority, so the round goes on.
prepare 1 "1 2 3"
"$forge" "$store" loco t4.key s1 value 3e38 >/dev/null
run 1 "1 2 3" --deadline 60
for k in 1 2 3; do
  grep -q "3 of 4 trainers included" "out$k-1" || fail "round 1 t$k: $(cat "out$k-1" "err$k-1")"
done
grep -q "(t4) excluded: .*over the bound" err1-1 err2-1 err3-1 || fail "round 1: t4 not excluded: $(cat err*-1)"
same 1 "1 2 3"
verify 1 "1 2 3"
ok "round 1: t4 excluded for a value over the bound; t1..t3 go on without --quorum, identical"

# Round 2: t3 is killed before it publishes and t4 stays gone. Round 1 had 3 members, so the
# quorum is 2: at the deadline t1 and t2 go on without them. A reduce-scatter round from copies of
# the same states (run rs) gives the same bits.
prepare 2 "1 2"
cp -a s1 q1 && cp -a s2 q2
run 2 "1 2" --deadline 5
for k in 1 2; do
  grep -q "2 of 4 trainers included" "out$k-2" || fail "round 2 t$k: $(cat "out$k-2" "err$k-2")"
done
same 2 "1 2"
verify 2 "1 2"
pids=()
for k in 1 2; do
  P loco round --store "$store" --run rs --key "t$k.key" --trust trust --state "q$k" --local "l$k-2.safetensors" \
    --reduce-scatter --shard-elems 1024 --deadline 5 >"rs-out$k" 2>"rs-err$k" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { cat rs-err* >&2; fail "round 2 (reduce-scatter) failed"; }; done
for k in 1 2; do
  cmp -s "q$k/theta-000000000003.safetensors" "$(th s1 3)" || fail "round 2: the reduce-scatter's theta differs (t$k)"
done
ok "round 2: t3 gone at the deadline; t1 and t2 go on with the quorum of 2 of round 1's 3 (all-gather and reduce-scatter)"

# Round 3: round 2 had 2 members, so both are needed, and both are there.
prepare 3 "1 2"
run 3 "1 2" --deadline 5
same 3 "1 2"
verify 3 "1 2"
grep -q "2 of 4 trainers included" out1-3 || fail "round 3: $(cat out1-3)"
ok "round 3: t1 and t2 go on alone, identical"

# Round 4: of round 3's two members one alone is no majority: t1 waits, and fails at its deadline
# with the state unchanged.
prepare 4 "1"
P loco round --store "$store" --run loco --key t1.key --trust trust --state s1 --local l1-4.safetensors \
  --deadline 1 >out1-4 2>err1-4 && fail "round 4: t1 went on alone"
grep -q "quorum not reached: 1 of 4 trainers published round 4 by the deadline (1.0 s), 2 needed" err1-4 \
  || fail "round 4: $(cat err1-4)"
P loco show --state s1 | grep -q "^round 4 " || fail "round 4: t1's state moved"
ok "round 4: one trainer of round 3's two is no quorum: refused at the deadline, state unchanged"
