#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A publisher killed with -9 at random moments of a step (the diff with NEW's state id fused in,
# parts uploading while it writes them, the head, the record, the copy of the last state): run
# again, each step is published once, a follower ends bit-identical, and the audit finds nothing
# but the orphaned parts of the killed runs (docs/sync.md, "Objects of a sync-patch record"; retention collects them).
# usage: publish_crash.sh FOLLOW_CHECK
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../node/follow_lib.sh"

# Parts of 4 KiB and up, so a step is many uploads and a kill often lands between two of them.
export PULSE_UPLOAD_PART=4096
P synth --params 20M --steps 3 --out ckpt >/dev/null
publish 0 0
# How long a step takes here (a run of its own): the kills land anywhere in that span.
ms() { echo $(( $(date +%s%N) / 1000000 )); }
P publish --store "$store" --run timing --key trainer.key --state timing "$(ckpt 0)" >/dev/null
t0=$(ms)
P publish --store "$store" --run timing --key trainer.key --state timing "$(ckpt 1)" >/dev/null
span=$(( $(ms) - t0 ))
P store rm --recursive "$store/timing/" >/dev/null 2>&1 || rm -rf store/timing
kills=0 early=0
for s in 1 2 3; do
  before=$(ls store/r/objects | wc -l)
  for round in 1 2 3 4; do
    "$PULSE_BIN" publish --store "$store" --run r --key trainer.key --state tstate "$(ckpt "$s")" >/dev/null 2>>kill.log &
    pid=$!
    sleep "$(awk -v r="$RANDOM" -v s="$span" 'BEGIN { printf "%.3f", r / 32768 * s / 1000 }')"
    if kill -9 "$pid" 2>/dev/null; then kills=$((kills + 1)); fi
    wait "$pid" 2>/dev/null || true
  done
  early=$((early + $(ls store/r/objects | wc -l) - before))   # parts the killed runs stored
  publish "$s" "$s"
done
[ "$kills" -ge 4 ] || fail "only $kills of 12 publishes were killed: the steps are too quick for this test"
[ "$early" -ge 1 ] || fail "no kill landed after a part was stored"

records=$(P manifest ls --store "$store" --run r --trust trainer.pub | awk '$2 == "sync-patch" { print $1 }' | tr '\n' ' ')
[ "$records" = "1 2 3 " ] || fail "sync-patch records of steps '$records', wanted each of 1 2 3 once"
mkdir f
follow f --once 2>f.log || fail "follow: $(cat f.log)"
cmp -s f/w.safetensors "$(ckpt 3)" || fail "the follower's weights differ from step 3"
rc=0
P manifest audit --store "$store" --run r --trust trainer.pub >audit.out 2>audit.err || rc=$?
others=$(grep -v 'orphan: no record names it' audit.err | grep -v '^pulse manifest audit: [0-9]* problem' || true)
[ -z "$others" ] || fail "the audit found more than orphaned parts: $others"
left=$(ls -A tstate | grep -v -x -e index.db -e index.db-wal -e index.db-shm -e lock -e 'last-[0-9a-f]*\.safetensors' \
  -e last.link -e pending.patch -e unsynced || true)
[ -z "$left" ] || fail "the publisher's state directory holds temporaries: $left"
ok "killed -9 $kills times in a ${span} ms publish ($early parts stored before a kill): steps 1..3 published once each, follower bit-identical, audit: $(grep -c orphan audit.err || true) orphaned parts and nothing else (exit $rc)"
