#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Patches by direction through a store (`pulse publish [--context] --by-direction`): each record
# after the second names a format-6 patch beside the plain one (format 5, or 4); a follower that
# applied the step before fetches it (fewer bytes than one without its directions, which fetches
# the plain patch), and every follower ends bit for bit at each step: after a damaged or stale
# directions file, from a keyframe, catching up over several steps; the audit passes.
set -u
P=${PULSE_BIN:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
fails=0; n=0
ok()  { n=$((n+1)); if ! "$@" >out 2>err; then echo "FAIL (exit $?): $*"; cat err; fails=$((fails+1)); fi; }
check() { n=$((n+1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails+1)); fi; }
pub() { ok "$P" publish --store "file://$T/store" --run r --key tr.key --state st --context --by-direction "$@"; }
pull() { ok "$P" pull --store "file://$T/store" --run r --trust tr.pub --state "$1" --weights "$2"; }
fetched() { sed -n 's/.*applied sync-patch, [0-9]* changes, \([0-9]*\) bytes fetched.*/\1/p' out | tail -1; }
id() { "$P" hash "$1"; }
step() { printf 'syn/step-%06d.safetensors' "$1"; }
versions() { find store -type f -exec python3 -c 'import sys; b=open(sys.argv[1],"rb").read(12); print(int.from_bytes(b[8:12],"little")) if b[:8]==b"PULSEPCH" else None' {} \; | sort | uniq -c | awk '{printf "%s:%s ", $2, $1}'; }

# A trainer at lr 3e-5 under Adam: its momentum carries each step on as the last went.
"$P" synth --params 4M --steps 6 --lr 3e-5 --out syn --threads 2 >/dev/null || { echo "FAIL: synth"; exit 1; }
"$P" keygen tr >/dev/null || { echo "FAIL: keygen"; exit 1; }

# Each `pulse publish` is a process of its own: the publisher's directions of the step before
# live in its state directory.
# two_followers PUB PULL LAST PERCENT: publish steps 0..LAST with PUB; after each, follower 1 pulls
# with PULL keeping its directions and follower 2 without them, both bit for bit. From step 3 on
# follower 1 holds the directions of the step before (kept from step 2, whose record was the
# first to name a patch by direction) and fetches PERCENT % of follower 2's bytes or fewer.
two_followers() {
  local pubf=$1 pullf=$2 last=$3 pct=$4 s b1 b2
  $pubf "$(step 0)"
  $pullf 1
  $pullf 2
  for s in $(seq 1 "$last"); do
    $pubf "$(step $s)"
    $pullf 1
    b1=$(fetched)
    rm -f "$pullf.2/directions"
    $pullf 2
    b2=$(fetched)
    check "[ \"\$(id $pullf.1.safetensors)\" = \"\$(id $(step $s))\" ] && [ \"\$(id $pullf.2.safetensors)\" = \"\$(id $(step $s))\" ]"
    if [ "$s" -ge 3 ]; then check "[ $((b1 * 100)) -lt $((b2 * pct)) ]"; echo "$pubf step $s: fetched $b1 by direction, $b2 plain"; fi
  done
}
pullf() { pull "pullf.$1" "pullf.$1.safetensors"; }
two_followers pub pullf 6 97
check "[ -s pullf.1/directions ] && [ -s st/last.dirs ]"
# The publisher's directions, built in a temporary beside last.dirs and renamed there, are those
# `pulse diff --dirs-out` writes of the same step, and no temporary is left.
"$P" diff "$(step 5)" "$(step 6)" -o ref6.p --dirs-out ref6.dirs >/dev/null 2>&1
check "cmp -s st/last.dirs ref6.dirs && [ -z \"\$(ls st | grep -E '^(last[.]dirs[.]|pending[.]patch)')\" ]"
# The store holds the plain patches of steps 1 to 6 and their heads (format 5) and the patches by
# direction of steps 2 to 6 (format 6).
check "[ '$(versions)' = '5:12 6:5 ' ]"

# A damaged directions file is dropped (logged) and the plain patch fetched; a stale one (of an
# earlier step) is not used; either way the step lands bit for bit.
"$P" synth --params 4M --steps 9 --lr 3e-5 --out syn --threads 2 >/dev/null || { echo "FAIL: synth 2"; exit 1; }
# What a publisher killed mid-step leaves in its state directory (the patch's temporary, the
# directions' temporaries) is removed by the next one, which publishes the step.
head -c 4096 /dev/urandom > st/last.dirs.tmp.Ab12Cd
head -c 4096 /dev/urandom > st/last.dirs.Ef34Gh
head -c 4096 /dev/urandom > st/pending.patch.tmp.Ij56Kl
pub "$(step 7)"
"$P" diff "$(step 6)" "$(step 7)" -o ref7.p --dirs-out ref7.dirs >/dev/null 2>&1
check "cmp -s st/last.dirs ref7.dirs && [ -z \"\$(ls st | grep -E '^(last[.]dirs[.]|pending[.]patch)')\" ]"
python3 -c 'import sys; b=bytearray(open(sys.argv[1],"rb").read()); b[len(b)//2]^=0x01; open(sys.argv[1],"wb").write(b)' pullf.1/directions
pullf 1
check "grep -q 'directions' err && [ \"\$(id pullf.1.safetensors)\" = \"\$(id $(step 7))\" ]"
cp pullf.1/directions stale.dirs
pub "$(step 8)"
pullf 1
cp stale.dirs pullf.1/directions
pub "$(step 9)"
pullf 1
check "[ \"\$(id pullf.1.safetensors)\" = \"\$(id $(step 9))\" ]"

# A follower that starts late: the keyframe, then every patch (the first plain, then by direction).
pull f3 w3.safetensors
check "[ \"\$(id w3.safetensors)\" = \"\$(id $(step 9))\" ]"
# A follower node from scratch: the keyframe, step 1 (no patch by direction yet), step 2 (plain:
# no directions held), then steps 3 to 9 by direction, as its metrics say.
ok "$P" node follow --store "file://$T/store" --run r --trust tr.pub --state h1 --weights h1.safetensors --once \
   --metrics-file h1.prom
metric() { sed -n "s/^$1 //p" h1.prom; }
check "[ \"\$(id h1.safetensors)\" = \"\$(id $(step 9))\" ] && [ \"\$(metric pulse_steps_applied_total)\" = 10 ] && [ \"\$(metric pulse_steps_by_direction_total)\" = 7 ]"
# kill -9 at random moments of a catch-up by direction (fetch, squash, directions, apply): the
# last run ends bit for bit at step 9, and the directions file left is whole, the directions of
# one of the steps (a step finished from the journal keeps those of the step before it).
for round in 1 2 3 4 5 6; do
  "$P" node follow --store "file://$T/store" --run r --trust tr.pub --state k1 --weights k1.safetensors --once \
    2>>k1.log &
  pid=$!
  sleep "0.$(printf '%03d' $((RANDOM % 300)))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
done
ok "$P" node follow --store "file://$T/store" --run r --trust tr.pub --state k1 --weights k1.safetensors --once
check "[ \"\$(id k1.safetensors)\" = \"\$(id $(step 9))\" ]"
whole=0
for s in 1 2 3 4 5 6 7 8 9; do
  "$P" diff "$(step $((s-1)))" "$(step $s)" -o ref.p --dirs-out "ref$s.dirs" >/dev/null 2>&1
  if [ -e k1/directions ] && cmp -s k1/directions "ref$s.dirs"; then whole=1; fi
done
check "[ ! -e k1/directions ] || [ $whole = 1 ]"
# The audit checks every patch object, those by direction too, and passes.
ok "$P" manifest audit --store "file://$T/store" --run r --trust tr.pub

# A patch by direction coded after a step the follower did not take: trainer A publishes 0, 1, 2
# and the follower takes them (holding the directions of 1 -> 2); trainer B, trusted too, then
# publishes 0, 0 -> 2 and 2 -> 3, its step 3 coded after state 0. The follower fetches it, finds
# it coded after another step, logs it and applies the plain patch, bit for bit.
"$P" keygen tb >/dev/null || { echo "FAIL: keygen tb"; exit 1; }
pubA() { ok "$P" publish --store "file://$T/store5" --run r --key tr.key --state sA --by-direction "$@"; }
pubB() { ok "$P" publish --store "file://$T/store5" --run r --key tb.key --state sB --by-direction "$@"; }
pull5() { ok "$P" pull --store "file://$T/store5" --run r --trust tr.pub --trust tb.pub --state m1 --weights m1.safetensors; }
pubA "$(step 0)"; pubA "$(step 1)"; pubA "$(step 2)"
pull5
pubB "$(step 0)"; pubB --step 2 "$(step 2)"; pubB --step 3 "$(step 3)"
pull5
check "grep -q 'by-direction-skipped' err && [ \"\$(id m1.safetensors)\" = \"\$(id $(step 3))\" ]"

# Without --context the plain patch is format 4, which every follower reads (engine-held ones
# too), and the patch by direction is still format 6: a follower that applied the step before
# fetches at least 20 % fewer bytes.
pub4() { ok "$P" publish --store "file://$T/store4" --run r --key tr.key --state st4 --by-direction "$@"; }
pull4() { ok "$P" pull --store "file://$T/store4" --run r --trust tr.pub --state "$1" --weights "$2"; }
pull4f() { pull4 "pull4f.$1" "pull4f.$1.safetensors"; }
two_followers pub4 pull4f 4 80
check "[ '$(cd "$T" && find store4 -type f -exec python3 -c 'import sys; b=open(sys.argv[1],"rb").read(12); print(int.from_bytes(b[8:12],"little")) if b[:8]==b"PULSEPCH" else None' {} \; | sort | uniq -c | awk '{printf "%s:%s ", $2, $1}')' = '4:8 6:3 ' ]"

# --by-direction codes ulp values.
n=$((n+1)); "$P" publish --store "file://$T/store" --run r2 --key tr.key --state st2 --by-direction --values abs \
  "$(step 1)" >/dev/null 2>err; rc=$?
if [ $rc -ne 2 ] || ! grep -q -- 'abs' err; then echo "FAIL: --by-direction with --values abs (exit $rc)"; fails=$((fails+1)); fi

echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
