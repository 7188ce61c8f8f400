#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# PULSELoCo's bound on shard values (docs/loco.md "Bounded values"): a trusted trainer whose shard
# holds finite but huge values (1e30, just over 2^16, 3e38 four rounds running) is excluded alike by
# every honest trainer, which keep bit-identical, finite theta; a value at the bound and an honest
# trainer's large moves are accepted; with --reduce-scatter an owner vetoes such a member, and an
# owner's reduced sums over K x 2^16 fail the round on every trainer, nothing committed.
#
# usage: bound.sh file|s3 LOCO_FORGE LOCOGEN_PY   (s3: the test RGW named by PULSE_RGW_ENV, else skip)
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: bound.sh file|s3 LOCO_FORGE LOCOGEN_PY" >&2; exit 2; }
forge=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1" loco-bound "$3"
LR=1e-6 H=8 CUT=1024
OVER=65536.0078125      # the next FP32 number above the bound 2^16
ROVER=196608.015625     # ... above 3 x 2^16, the bound of a sum of three members

G init theta0.safetensors 23
for k in 1 2 3; do
  P loco init --state "s$k" --global theta0.safetensors >/dev/null   # all-gather
  P loco init --state "q$k" --global theta0.safetensors >/dev/null   # reduce-scatter
done
th() { printf '%s/theta-%012d.safetensors' "$1" "$2"; }
ef() { printf '%s/e-%012d.safetensors' "$1" "$2"; }

prepare() {   # prepare ST R [TRAINERS]: theta_local per trainer, copies of theta_R and e_R
  local st=$1 r=$2 k outs=()
  for k in ${3:-1 2 3}; do outs+=("$st-l$k-$r.safetensors"); done
  G local "$(th ${st}1 "$r")" "$((r * 10 + 5))" "$LR" "$H" "${outs[@]}"
  for k in ${3:-1 2 3}; do
    cp "$(th $st$k "$r")" "$st-pre-theta$k-$r.safetensors"
    cp "$(ef $st$k "$r")" "$st-pre-e$k-$r.safetensors"
  done
}
# run ST RUN R "TRAINERS" WANT ARGS...: concurrent rounds; each must exit WANT (0 or 1)
run() {
  local st=$1 run=$2 r=$3 who=$4 want=$5 k pids=() rc
  shift 5
  for k in $who; do
    P loco round --store "$store" --run "$run" --key "t$k.key" --trainers trust/t1.pub trust/t2.pub trust/t3.pub \
      --state "$st$k" --local "$st-l$k-$r.safetensors" --shard-elems $CUT --deadline 60 "$@" \
      >"$run-out$k-$r" 2>"$run-err$k-$r" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    rc=0
    wait "$p" || rc=$?
    [ "$rc" = "$want" ] || { cat "$run"-err*-"$r" >&2; fail "round $r ($run): a trainer exited $rc, not $want"; }
  done
}
same() {   # same ST R "TRAINERS": identical theta_{R+1}, momentum, state line; theta finite
  local st=$1 r=$2 who=($3) k n=$(($2 + 1))
  for k in "${who[@]:1}"; do
    cmp -s "$(th $st${who[0]} $n)" "$(th $st$k $n)" || fail "round $r ($st): theta of t$k differs"
    cmp -s "$st${who[0]}/m-$(printf %012d $n).safetensors" "$st$k/m-$(printf %012d $n).safetensors" ||
      fail "round $r ($st): momentum of t$k differs"
    [ "$(P loco show --state "$st$k")" = "$(P loco show --state "$st${who[0]}")" ] || fail "round $r: state lines differ"
  done
  P loco show --state "$st${who[0]}" | grep -q "^round $n " || fail "round $r ($st): state did not advance"
  G finite "$(th $st${who[0]} $n)" >/dev/null || fail "round $r ($st): theta_$n is not finite"
}
verify() {   # verify ST R "TRAINERS": locogen.py recomputes the plain mean of exactly these trainers
  local st=$1 r=$2 who=" $3 " k args=() first=""
  for k in $order; do
    case $who in *" $k "*) ;; *) continue ;; esac
    [ -n "$first" ] || first=$k
    args+=("$st-l$k-$r.safetensors" "$st-pre-e$k-$r.safetensors" "$(ef $st$k $((r + 1)))" 1)
  done
  G verify "$st-pre-theta$first-$r.safetensors" "$(th $st$first $((r + 1)))" "${args[@]}" >/dev/null ||
    fail "round $r ($st): locogen.py verify"
}
# excluded R WHY: t1 and t2 both left t3 out (each excluded it itself, or adopted a member list that did)
excluded() {
  local r=$1 why=$2 k
  for k in 1 2; do
    grep -Eq "2 of 3 trainers included, (1 excluded;|0 excluded \(members adopted)" "ag-out$k-$r" ||
      fail "round $r t$k: t3 not excluded: $(cat "ag-out$k-$r" "ag-err$k-$r")"
  done
  grep -q "(t3) excluded: .*$why" ag-err1-$r ag-err2-$r || fail "round $r: nobody said why: $(cat ag-err*-$r)"
}

# Round 0: three real trainers; t1's theta_local moves some weights by up to 60 000 (under the
# bound): nobody is excluded, and the mean is recomputed bit for bit.
prepare s 0
G shift s-l1-0.safetensors s-l1-0.safetensors 0:60000 1:-60000 7:1000 8:-1000 9:250.5 >/dev/null
run s ag 0 "1 2 3" 0
for k in 1 2 3; do
  grep -q "3 of 3 trainers included, 0 excluded" "ag-out$k-0" || fail "round 0 t$k: $(cat "ag-out$k-0")"
done
same s 0 "1 2 3"
verify s 0 "1 2 3"
ok "round 0: an honest trainer's large moves (|a| up to 60000) are included; three identical, recomputed"

# Rounds 1-6: t3's trusted key signs a shard with +V and -V (t3's process never runs); t1 and t2
# must leave it out, agree bit for bit, and hold exactly the mean of their own two shards.
r=1
for v in 1e30 $OVER 3e38 3e38 3e38 3e38; do
  prepare s $r "1 2"
  "$forge" "$store" ag t3.key s1 value "$v" >/dev/null
  run s ag $r "1 2" 0 --quorum 2
  excluded $r "over the bound"
  same s $r "1 2"
  verify s $r "1 2"
  ok "round $r: t3's shard with |v| = $v excluded by t1 and t2 alike; theta finite and identical"
  r=$((r + 1))
done

# Round 7: a value exactly at the bound is accepted (t3 is in the mean on both).
prepare s 7 "1 2"
"$forge" "$store" ag t3.key s1 value 65536 >/dev/null
run s ag 7 "1 2" 0 --quorum 2
for k in 1 2; do grep -q "3 of 3 trainers included" "ag-out$k-7" || fail "round 7 t$k: $(cat "ag-out$k-7")"; done
same s 7 "1 2"
ok "round 7: a value exactly at the bound (65536) is accepted by both"

# Reduce-scatter round 0: t3's member shard just over the bound, in a range t1 or t2 owns (ranges
# go round-robin to the members in node order): its owner vetoes t3, attempt 1 goes on without it.
pos=0
for k in $order; do [ "$k" = 3 ] && break; pos=$((pos + 1)); done
prepare q 0 "1 2"
"$forge" "$store" rs t3.key q1 value $OVER $((((pos + 1) % 3) * CUT)) $CUT >/dev/null
run q rs 0 "1 2" 0 --quorum 2 --reduce-scatter
grep -q "vetoed: .*over the bound" rs-err1-0 rs-err2-0 || fail "rs round 0: no owner vetoed t3: $(cat rs-err*-0)"
for k in 1 2; do
  grep -q "reduce-scatter attempt 1, 1 vetoed" "rs-out$k-0" || fail "rs round 0 t$k: $(cat "rs-out$k-0")"
done
same q 0 "1 2"
verify q 0 "1 2"
ok "reduce-scatter: a member's value just over the bound is vetoed by its owner; t1 and t2 identical"

# Reduce-scatter round 1: t3 signs a sound shard (so it is a member and owns ranges) and, as owner
# of range POS (the first it owns), reduced sums beyond 3 x 2^16: t1 and t2 both refuse the round,
# exit 1, and stay at round 1. At exactly 3 x 2^16 the round goes through on both.
prepare q 1 "1 2"
n=0
for v in 3e38 $ROVER 196608; do
  n=$((n + 1)) run=rs$n
  "$forge" "$store" "$run" t3.key q1 visible $((((pos + 1) % 3) * CUT)) $CUT >/dev/null
  "$forge" "$store" "$run" t3.key q1 reduced "$v" $((pos * CUT)) $CUT >/dev/null
  if [ "$v" = 196608 ]; then
    run q "$run" 1 "1 2" 0 --quorum 2 --reduce-scatter
    same q 1 "1 2"
    ok "reduce-scatter: an owner's sums exactly at 3 x 2^16 are accepted; t1 and t2 identical"
  else
    run q "$run" 1 "1 2" 1 --quorum 2 --reduce-scatter
    for k in 1 2; do
      grep -q "a sum over the bound" "$run-err$k-1" || fail "rs round 1 ($v) t$k: $(cat "$run-err$k-1")"
      P loco show --state "q$k" | grep -q "^round 1 " || fail "rs round 1 ($v) t$k: the state moved"
    done
    ok "reduce-scatter: an owner's reduced sums of $v fail the round on t1 and t2 alike, nothing committed"
  fi
done
ok "all"
