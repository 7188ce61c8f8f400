#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# PULSELoCo rounds on file://: three trainer processes per round must end with the same theta_{r+1}
# bits and result state id; an independent FP32 recomputation (locogen.py verify) checks the gate,
# error feedback (sent + e_new == a) and the plain mean; momentum rounds stay identical; a late
# trainer folds its whole a back into e; bad shards from trusted keys exclude their trainer.
#
# usage: rounds.sh file|s3 LOCO_FORGE LOCOGEN_PY   (s3: the test RGW named by PULSE_RGW_ENV, else skip)
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: rounds.sh file|s3 LOCO_FORGE LOCOGEN_PY" >&2; exit 2; }
forge=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1" loco "$3"
LR=1e-6 H=8
P keygen --comment mallory mallory >/dev/null

G init theta0.safetensors 7
for k in 1 2 3; do P loco init --state "s$k" --global theta0.safetensors >/dev/null; done
P loco init --state s1 --from theta0.safetensors 2>err && fail "init over an existing state"
grep -q "already holds a loco state" err || fail "init over a state: $(cat err)"

th() { printf '%s/theta-%012d.safetensors' "$1" "$2"; }
ef() { printf '%s/e-%012d.safetensors' "$1" "$2"; }

# prepare R [TRAINERS]: local updates from theta_R, and a copy of e_R (the round deletes it)
prepare() {
  local r=$1 k
  local outs=()
  for k in ${2:-1 2 3}; do outs+=("l$k-$r.safetensors"); done
  G local "$(th s1 "$r")" "$((r * 10))" "$LR" "$H" "${outs[@]}"
  for k in ${2:-1 2 3}; do
    cmp -s "$(th s1 "$r")" "$(th s$k "$r")" || fail "round $r starts from different theta"
    cp "$(th s$k "$r")" "pre-theta$k-$r.safetensors"
    cp "$(ef s$k "$r")" "pre-e$k-$r.safetensors"
  done
}
# The CPU mask the suite runs under (CI reruns it with PULSE_CPU_MASK=ffffffff): t1 and t2 keep it.
mask_env=${PULSE_CPU_MASK-}
cpu_for() {   # cpu_for K: t3 runs the scalar reference kernels, t1 and t2 what the suite gives them
  if [ "$1" = 3 ]; then export PULSE_CPU_MASK=ffffffff
  elif [ -n "$mask_env" ]; then export PULSE_CPU_MASK=$mask_env
  else unset PULSE_CPU_MASK; fi
}
# The issue's spellings (--trainers PUB...); --trust DIR and init --from are tested below too.
round_args() { echo --store "$store" --run loco --key "t$1.key" --trainers trust/t1.pub trust/t2.pub trust/t3.pub \
  --state "s$1" --local "l$1-$2.safetensors" -o "new$1-$2.safetensors"; }
# run R "TRAINERS" ARGS...: the trainers' rounds as concurrent processes; every one must succeed
run() {
  local r=$1 who=$2 k pids=() rc=0
  shift 2
  for k in $who; do
    cpu_for "$k"
    # shellcheck disable=SC2046
    P loco round $(round_args "$k" "$r") --shard-elems 3000 --local-steps $H "$@" >"out$k-$r" 2>"err$k-$r" &
    pids+=($!)
  done
  cpu_for 1
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ $rc != 0 ]; then cat err*-"$r" >&2; fail "round $r failed"; fi
  for k in $who; do echo "  t$k: $(cat "out$k-$r")"; done
}
# start K R ARGS...: trainer K's round in the background, verbose (pid in $bg); published K R waits,
# by watching its log, until its shard record is in the store. The rounds below order the trainers
# by these events, never by how long something takes.
start() {
  local k=$1 r=$2
  shift 2
  cpu_for "$k"
  # shellcheck disable=SC2046
  "$PULSE_BIN" loco round $(round_args "$k" "$r") --shard-elems 3000 -v "$@" >"out$k-$r" 2>"err$k-$r" &
  bg=$!
  cpu_for 1
}
published() {
  local k=$1 r=$2 pid=$3 i
  for ((i = 0; i < 3000; i++)); do
    grep -q "published " "err$k-$r" && return 0
    kill -0 "$pid" 2>/dev/null || { cat "err$k-$r" >&2; fail "round $r: t$k ended before publishing its shards"; }
    sleep 0.1
  done
  kill "$pid"
  fail "round $r: t$k did not publish its shards in 300 s"
}
finish() {   # finish K R PID [RC]: trainer K's background round ended with exit status RC (default 0)
  local k=$1 r=$2 pid=$3 want=${4:-0} got=0
  wait "$pid" || got=$?
  [ "$got" = "$want" ] || { cat "err$k-$r" >&2; fail "round $r: t$k exited $got, not $want"; }
  echo "  t$k: $(cat "out$k-$r")"
}
same() {   # same R "TRAINERS": identical theta_{R+1}, momentum and state line
  local r=$1 who=($2) k
  for k in "${who[@]:1}"; do
    cmp -s "$(th s${who[0]} $((r + 1)))" "$(th s$k $((r + 1)))" || fail "round $r: theta differs between t${who[0]} and t$k"
    cmp -s "s${who[0]}/m-$(printf %012d $((r + 1))).safetensors" "s$k/m-$(printf %012d $((r + 1))).safetensors" ||
      fail "round $r: momentum differs"
    [ "$(P loco show --state "s${who[0]}")" = "$(P loco show --state "s$k")" ] || fail "round $r: state ids differ"
  done
  P loco show --state "s${who[0]}" | grep -q "^round $((r + 1)) " || fail "round $r: state did not advance"
}
# verify R "TRAINERS" "INCLUDED": locogen.py recomputes every element (plain mean, lr 1, mu 0)
verify() {
  local r=$1 who=" $2 " inc=" $3 " k args=() first=""
  for k in $order; do
    case $who in *" $k "*) ;; *) continue ;; esac
    [ -n "$first" ] || first=$k
    case $inc in *" $k "*) i=1 ;; *) i=0 ;; esac
    args+=("l$k-$r.safetensors" "pre-e$k-$r.safetensors" "$(ef s$k $((r + 1)))" $i)
  done
  G verify "pre-theta$first-$r.safetensors" "$(th s$first $((r + 1)))" "${args[@]}"
}

# Rounds 0-2: plain averaging, all three trainers, checked element by element.
for r in 0 1 2; do
  prepare $r
  # round 1 sends BF16 values (the remainder stays in e): still identical on all three
  if [ $r = 1 ]; then run $r "1 2 3" --deadline 60 --values bf16; else run $r "1 2 3" --deadline 60; fi
  same $r "1 2 3"
  cmp -s "new1-$r.safetensors" "$(th s1 $((r + 1)))" || fail "round $r: -o file differs from the state's theta_{r+1}"
  if [ $r != 1 ]; then
    verify $r "1 2 3" "1 2 3"
    ok "round $r: three trainers identical, gate/error feedback/mean recomputed bit for bit"
  else
    ok "round $r: BF16 values, three trainers identical"
  fi
done
grep -q "3 of 3 trainers included" out1-2 || fail "round 2 output: $(cat out1-2)"

# Rounds 3-4: outer lr 0.7, Nesterov momentum 0.9.
for r in 3 4; do
  prepare $r
  run $r "1 2 3" --deadline 60 --outer-lr 0.7 --momentum 0.9 --nesterov
  same $r "1 2 3"
  ok "round $r: Nesterov momentum, three trainers identical"
done

# Round 5: t3 is late. t2 publishes first and waits (it would wait 600 s for t3); then t1, which
# finds t2's record, gives t3 no time at all (--deadline 0) and goes on with the quorum of 2; t2
# then adopts t1's result. t3 learns from that result that it missed the round, folds its whole a
# back into e and lands on theta_6.
prepare 5
start 2 5 --deadline 600 --quorum 2
published 2 5 "$bg"
run 5 "1" --deadline 0 --quorum 2
finish 2 5 "$bg"
grep -q "2 of 3 trainers included, 0 excluded;" out1-5 || fail "round 5 t1: $(cat out1-5)"
grep -q "2 of 3 trainers included, 0 excluded (members adopted" out2-5 || fail "round 5 t2: $(cat out2-5)"
run 5 "3" --deadline 0 --quorum 2
grep -q "not this one.*(members adopted" out3-5 || fail "round 5: t3 should be left out: $(cat out3-5)"
same 5 "1 2 3"
verify 5 "1 2 3" "1 2"
ok "round 5: late trainer folded a back into e (e_new == a everywhere) and continued from theta_6"

# Round 6: t3's key signs a shard with an entry the gate keeps back; round 7: a NaN; round 8: t3's
# genuine round-4 record replayed, and a record by an untrusted key. Each time t1 and t2 go on.
#
# The order is explicit: t2 publishes its shard and is then stopped (SIGSTOP); t1 runs the whole
# round alone, so t1 is the one that reads t3's shard and excludes it. t2 continues (SIGCONT) and
# finds t1's result. By docs/loco.md step 5 it then adopts that member list (t1, t2) without
# reading t3's shard, so it excludes nobody itself -- unless it had already listed all three
# records before it was stopped, in which case it checks t3's shard itself and excludes it. Both
# are the protocol; either way t3 must not be in t2's mean.
bad_round() {
  local r=$1 want=$2
  shift 2
  prepare $r "1 2"
  "$forge" "$store" loco t3.key s1 "$@" >/dev/null
  start 2 $r --deadline 600 --quorum 2
  local t2=$bg
  published 2 $r "$t2"
  kill -STOP "$t2"
  run $r "1" --deadline 600 --quorum 2
  kill -CONT "$t2"
  finish 2 $r "$t2"
  grep -q "excluded: .*$want" "err1-$r" || fail "round $r: t1 did not exclude t3 ($want): $(cat "err1-$r")"
  grep -q "2 of 3 trainers included, 1 excluded;" "out1-$r" || fail "round $r t1: $(cat "out1-$r")"
  if ! grep -q "2 of 3 trainers included, 0 excluded (members adopted from an earlier result)" "out2-$r"; then
    grep -q "excluded: .*$want" "err2-$r" && grep -q "2 of 3 trainers included, 1 excluded;" "out2-$r" ||
      fail "round $r t2: neither adopted t1's members nor excluded t3: $(cat "out2-$r" "err2-$r")"
  fi
  same $r "1 2"
  [ $r != 6 ] || verify $r "1 2" "1 2"
}
bad_round 6 "does not pass the gate" invisible
ok "round 6: byzantine shard (invisible entry, trusted signature) refused, t3 excluded"
P loco round --store "$store" --run loco --key t3.key --trust trust --state s3 --local l1-6.safetensors \
  --deadline 1 >/dev/null 2>err && fail "t3 ran round 6 over its own forged record"
grep -q "different loco-shard record" err || fail "t3 round 6: $(cat err)"
bad_round 7 "not finite" nan
ok "round 7: NaN shard refused"
"$forge" "$store" loco mallory.key s1 invisible >/dev/null 2>&1 || true   # untrusted: never even read
bad_round 8 "replayed" replay 4
ok "round 8: replayed round-4 record refused; untrusted writer ignored"
grep -q mallory err1-8 && fail "an untrusted record was read"

# Round 9: t3's trusted key publishes a result with another theta_10 (its member list unreadable).
# t2 publishes first, then t1 goes on with the quorum of 2 at once (--deadline 0; t3 has no shard);
# t2 adopts t1's members. They agree with each other, but each reports the mismatch loudly, exit 1.
prepare 9 "1 2"
"$forge" "$store" loco t3.key s1 result >/dev/null
start 2 9 --deadline 600 --quorum 2
published 2 9 "$bg"
cpu_for 1
P loco round $(round_args 1 9) --shard-elems 3000 --deadline 0 --quorum 2 >out1-9 2>err1-9 && fail "round 9: t1 must fail on the mismatch"
finish 2 9 "$bg" 1
grep -q "MISMATCH: trainer .*(t3) reports a different theta" err1-9 || fail "round 9: $(cat err1-9)"
grep -q "MISMATCH: trainer .*(t3) reports a different theta" err2-9 || fail "round 9: $(cat err2-9)"
grep -q "result mismatch" err2-9 || fail "round 9: $(cat err2-9)"
same 9 "1 2"
ok "round 9: a differing result by a trusted trainer is reported (MISMATCH, exit 1)"

echo "bytes per round (trainer t1): $(sed -n 's/.*entries (\([^)]*\)).* shard bytes (\([^,]*\),.*/\1, \2/p' out1-2)"
ok "all rounds"
