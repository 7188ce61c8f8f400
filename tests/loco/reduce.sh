#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# PULSELoCo's reduce-scatter (docs/loco.md): three trainer processes per round with --reduce-scatter
# must end with the same theta_{r+1} bits, equal to an all-gather round run from copies of the same
# states (and to locogen.py's independent recomputation); a byzantine shard in a range another
# trainer owns is vetoed and the round completes without its trainer; t1 publishes every round's
# view by the sync protocol and a follower pulls the same bits. Bytes downloaded per trainer printed.
#
# usage: reduce.sh file|s3 LOCO_FORGE LOCOGEN_PY   (s3: the test RGW named by PULSE_RGW_ENV, else skip)
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: reduce.sh file|s3 LOCO_FORGE LOCOGEN_PY" >&2; exit 2; }
forge=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1" loco-rs "$3"
LR=1e-6 H=8 CUT=1024

G init theta0.safetensors 11
for k in 1 2 3; do
  P loco init --state "s$k" --global theta0.safetensors >/dev/null   # reduce-scatter
  P loco init --state "a$k" --global theta0.safetensors >/dev/null   # all-gather, the reference
done
th() { printf '%s/theta-%012d.safetensors' "$1" "$2"; }
ef() { printf '%s/e-%012d.safetensors' "$1" "$2"; }
vw() { printf '%s/view-%012d.safetensors' "$1" "$2"; }

prepare() {   # prepare R [TRAINERS]
  local r=$1 k outs=()
  for k in ${2:-1 2 3}; do outs+=("l$k-$r.safetensors"); done
  G local "$(th s1 "$r")" "$((r * 10 + 3))" "$LR" "$H" "${outs[@]}"
  for k in ${2:-1 2 3}; do
    cp "$(th s$k "$r")" "pre-theta$k-$r.safetensors"
    cp "$(ef s$k "$r")" "pre-e$k-$r.safetensors"
  done
}
# run R WAY "TRAINERS" ARGS...: concurrent rounds; WAY rs (states s*, run rs) or ag (states a*, run ag)
run() {
  local r=$1 way=$2 who=$3 k pids=() rc=0 st=s run=rs extra=(--reduce-scatter)
  shift 3
  if [ "$way" = ag ]; then st=a run=ag extra=(); fi
  for k in $who; do
    P loco round --store "$store" --run $run --key "t$k.key" --trainers trust/t1.pub trust/t2.pub trust/t3.pub \
      --state "$st$k" --local "l$k-$r.safetensors" --shard-elems $CUT --local-steps $H "${extra[@]}" \
      "$@" >"$way-out$k-$r" 2>"$way-err$k-$r" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ $rc != 0 ]; then cat "$way"-err*-"$r" >&2; fail "round $r ($way) failed"; fi
}
# start WAY K R ARGS...: trainer K's round in the background, verbose (pid in $bg); published WAY K R
# waits, by watching its log, until its shard record is in the store (ordering by events, not time).
start() {
  local way=$1 k=$2 r=$3 st=s run=rs extra=(--reduce-scatter)
  shift 3
  if [ "$way" = ag ]; then st=a run=ag extra=(); fi
  "$PULSE_BIN" loco round --store "$store" --run $run --key "t$k.key" --trainers trust/t1.pub trust/t2.pub \
    trust/t3.pub --state "$st$k" --local "l$k-$r.safetensors" --shard-elems $CUT "${extra[@]}" -v "$@" \
    >"$way-out$k-$r" 2>"$way-err$k-$r" &
  bg=$!
}
published() {
  local way=$1 k=$2 r=$3 pid=$4 i
  for ((i = 0; i < 3000; i++)); do
    grep -q "published " "$way-err$k-$r" && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$way-err$k-$r" >&2; fail "round $r: $way t$k ended before publishing"; }
    sleep 0.1
  done
  kill "$pid"
  fail "round $r: $way t$k did not publish its shards in 300 s"
}
finish() {
  local way=$1 k=$2 r=$3 pid=$4
  wait "$pid" || { cat "$way-err$k-$r" >&2; fail "round $r: $way t$k failed"; }
}
# same R "TRAINERS": every rs trainer and every ag trainer holds the same theta_{R+1}, momentum, state line
same() {
  local r=$1 k n=$(($1 + 1))
  local ref
  ref=$(P loco show --state s${2%% *})
  for k in $2; do
    for d in s a; do
      cmp -s "$(th s${2%% *} $n)" "$(th $d$k $n)" || fail "round $r: theta of $d$k differs from s${2%% *}'s"
      cmp -s "s${2%% *}/m-$(printf %012d $n).safetensors" "$d$k/m-$(printf %012d $n).safetensors" ||
        fail "round $r: momentum of $d$k differs"
      cmp -s "$(ef s$k $n)" "$(ef $d$k $n)" || fail "round $r: e of trainer $k differs between the two ways"
      [ "$(P loco show --state $d$k)" = "$ref" ] || fail "round $r: state line of $d$k differs"
    done
  done
  echo "$ref" | grep -q "^round $n " || fail "round $r: state did not advance"
}
down() {   # down WAY R K: bytes trainer K downloaded
  sed -n 's/.* downloaded \([0-9]*\) bytes;.*/\1/p' "$1-out$3-$2"
}

# Round 0: plain averaging; t1 publishes the view as step 1 of run "serve".
prepare 0
run 0 rs "1 2 3" --deadline 60 --publish-run serve
run 0 ag "1 2 3" --deadline 60
same 0 "1 2 3"
args=()
for k in $order; do args+=("l$k-0.safetensors" "pre-e$k-0.safetensors" "$(ef s$k 1)" 1); done
G verify "pre-theta1-0.safetensors" "$(th s1 1)" "${args[@]}"
for k in 1 2 3; do
  grep -q "reduce-scatter attempt 0, 0 vetoed, owned [1-9]" "rs-out$k-0" || fail "round 0 t$k: $(cat "rs-out$k-0")"
done
grep -q "published theta_1's view as step 1 of run serve" rs-out1-0 ||
  fail "round 0: t1 did not publish: $(cat rs-out1-0)"
ok "round 0: reduce-scatter gives the all-gather's theta_1 bits on all three (and locogen.py's)"
echo "  bytes downloaded per trainer, round 0: reduce-scatter $(down rs 0 1) $(down rs 0 2) $(down rs 0 3)," \
  "all-gather $(down ag 0 1) $(down ag 0 2) $(down ag 0 3)"

# Round 1: BF16 values, outer lr 0.7 with Nesterov momentum 0.9; t1 publishes step 2.
prepare 1
run 1 rs "1 2 3" --deadline 60 --values bf16 --outer-lr 0.7 --momentum 0.9 --nesterov --publish-run serve
run 1 ag "1 2 3" --deadline 60 --values bf16 --outer-lr 0.7 --momentum 0.9 --nesterov
same 1 "1 2 3"
ok "round 1: BF16 values and Nesterov momentum, the same bits both ways"

# A follower of run "serve" (trusting t1) pulls both rounds as ordinary steps.
P pull --store "$store" --run serve --trust t1.pub --state follower --weights served.safetensors >pull-out ||
  fail "pull: $(cat pull-out)"
cmp -s served.safetensors "$(vw s1 2)" || fail "the follower's weights differ from the state's view of theta_2"
P pull --store "$store" --run serve --trust t1.pub --state follower --weights served.safetensors >/dev/null
ok "a follower pulled the two rounds' views (steps 1-2) and holds theta_2's view bit for bit"

# Round 2: t3 is late. t2 publishes and waits (600 s, quorum 2); t1 then finds t2's record and
# plans at once without t3 (--deadline 0 --quorum 2); t2 follows t1's plan. t3 comes afterwards
# with the default quorum (all three): it follows the plan that leaves it out, owns nothing,
# fetches the sums, folds its whole a back into e and holds the same theta_3. The all-gather
# copies do the same (t3 adopts the result there).
prepare 2
for way in rs ag; do
  start $way 2 2 --deadline 600 --quorum 2
  published $way 2 2 "$bg"
  run 2 $way "1" --deadline 0 --quorum 2
  finish $way 2 2 "$bg"
  run 2 $way "3" --deadline 0
done
same 2 "1 2 3"
args=()
for k in $order; do
  i=1; [ "$k" = 3 ] && i=0
  args+=("l$k-2.safetensors" "pre-e$k-2.safetensors" "$(ef s$k 3)" $i)
done
G verify "pre-theta1-2.safetensors" "$(th s1 3)" "${args[@]}"
grep -q "2 of 3 trainers included (not this one" rs-out3-2 || fail "round 2 t3: $(cat rs-out3-2)"
grep -q "reduce-scatter attempt 0, 0 vetoed, owned 0 ranges" rs-out3-2 || fail "round 2 t3: $(cat rs-out3-2)"
ok "round 2: a late trainer follows the plan without it, folds a back into e (e_new == a) and lands on theta_3"

# Round 3: t3's trusted key signs a shard (on the cut) with an entry the gate keeps back, in a
# range that another trainer owns (ranges go round-robin to the members in node-id order), so an
# owner vetoes t3 and everybody goes on to attempt 1 without it. t3's process never runs.
prepare 3 "1 2"
pos=0
for k in $order; do [ "$k" = 3 ] && break; pos=$((pos + 1)); done
g=$(((pos + 1) % 3))   # a range of the first tensor (attn.q.weight, 6 ranges) owned by t1 or t2
"$forge" "$store" rs t3.key s1 invisible $((g * CUT)) $CUT >/dev/null
"$forge" "$store" ag t3.key a1 invisible $((g * CUT)) $CUT >/dev/null
run 3 rs "1 2" --deadline 60 --quorum 2
run 3 ag "1 2" --deadline 60 --quorum 2
same 3 "1 2"
args=()
for k in $order; do [ "$k" = 3 ] || args+=("l$k-3.safetensors" "pre-e$k-3.safetensors" "$(ef s$k 4)" 1); done
G verify "pre-theta1-3.safetensors" "$(th s1 4)" "${args[@]}"
grep -q "vetoed: .*does not pass the gate" rs-err1-3 rs-err2-3 || fail "round 3: no owner vetoed t3: $(cat rs-err*-3)"
for k in 1 2; do
  grep -q "(t3) is left out of attempt 1" "rs-err$k-3" || fail "round 3 t$k: $(cat "rs-err$k-3")"
  grep -q "2 of 3 trainers included" "rs-out$k-3" || fail "round 3 t$k: $(cat "rs-out$k-3")"
  grep -q "reduce-scatter attempt 1, 1 vetoed" "rs-out$k-3" || fail "round 3 t$k: $(cat "rs-out$k-3")"
done
ok "round 3: the byzantine shard was vetoed by its range's owner; attempt 1 without t3 gives the all-gather's bits"
echo "  bytes downloaded per trainer, round 3: reduce-scatter $(down rs 3 1) $(down rs 3 2)," \
  "all-gather $(down ag 3 1) $(down ag 3 2)"

# Round 4: t3's key signs a sound shard (one visible entry) and t3 never runs: it is a member and
# owns ranges but never sums them. t1 and t2 wait --owner-wait 3 s for the owners, leave t3 out of
# attempt 1 and agree (--quorum 1: on a loaded machine one of them may also drop the other as
# late; the decision that wins is the same for both, which is what is checked).
prepare 4 "1 2"
"$forge" "$store" rs t3.key s1 visible 0 $CUT >/dev/null
run 4 rs "1 2" --deadline 60 --quorum 1 --owner-wait 3
cmp -s "$(th s1 5)" "$(th s2 5)" || fail "round 4: t1 and t2 differ"
[ "$(P loco show --state s1)" = "$(P loco show --state s2)" ] || fail "round 4: state lines differ"
grep -q "(t3) missed the owners' deadline (3.0 s) in attempt 0" rs-err1-4 rs-err2-4 ||
  fail "round 4: nobody saw t3 miss the owners' deadline: $(cat rs-err*-4)"
for k in 1 2; do
  grep -q "(t3) is left out of attempt 1" "rs-err$k-4" || fail "round 4 t$k: $(cat "rs-err$k-4")"
  grep -q "reduce-scatter attempt 1, [12] vetoed" "rs-out$k-4" || fail "round 4 t$k: $(cat "rs-out$k-4")"
done
ok "round 4: an owner that never sums is left out after --owner-wait; the others agree"

# --publish-state without --publish-run is a usage error.
P loco round --store "$store" --run rs --key t1.key --trust trust --state s1 --local l1-4.safetensors \
  --publish-state x 2>err && fail "--publish-state without --publish-run"
grep -q "go with --publish-run" err || fail "usage: $(cat err)"
ok "all"
