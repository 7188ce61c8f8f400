#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Junk in a real S3 bucket (RGW): an unsigned far-future record, a misnamed key and a replayed
# record under the trainer's prefix (and a head naming the junk) do not stop `pulse node follow`.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../s3/lib.sh
. "$here/../s3/lib.sh"
P() { timeout 120 "$PULSE_BIN" "$@"; }
metric() { awk -v n="$2" '$1 == n { print $2 }' "$1"; }
cd "$work"
store="s3://$bucket/$prefix"
P keygen --comment trainer trainer >keygen.out
node=$(sed -n 's/^node id //p' keygen.out)
[ ${#node} = 64 ] || fail "no node id from keygen: $(cat keygen.out)"
P synth --params 1M --steps 6 --out ckpt >/dev/null
publish() {
  local i
  for i in $(seq "$1" "$2"); do
    P publish --store "$store" --run r --key trainer.key --state tstate "$(printf 'ckpt/step-%06d.safetensors' "$i")" \
      >/dev/null || fail "publish step $i"
  done
}
follow() { P node follow --store "$store" --run r --trust trainer.pub --state f/state --weights f/w.safetensors "$@"; }
rec() { printf 'records/sync-patch/%012d/%s' "$1" "$node"; }
put() { P store put "$store/r/$1" "$2" >/dev/null || fail "put $1"; }

publish 0 3
mkdir f
follow --once 2>f0.log || fail "first catch-up: $(cat f0.log)"
head -c 300 /dev/urandom >junk.bin
put "$(rec 999999999999)" junk.bin
P store get "$store/r/$(rec 1)" -o r1.bin >/dev/null || fail "get step 1's record"
put "$(rec 100)" r1.bin
put "$(rec 7)x" r1.bin
printf '%s\n' "$(rec 999999999999)" >head.txt
publish 4 6
put "heads/sync/$node" head.txt
follow --once --metrics-file f1.prom 2>f1.log || fail "pull with junk in the bucket: $(cat f1.log)"
cmp -s ckpt/step-000006.safetensors f/w.safetensors || fail "steps 4..6 were not applied: $(cat f1.log)"
[ "$(metric f1.prom pulse_lag_steps)" = 0 ] || fail "junk moved pulse_lag_steps: $(cat f1.prom)"
[ "$(metric f1.prom pulse_verify_failures_total)" = 2 ] || fail "verify failures are not 2: $(cat f1.prom)"
follow --once --metrics-file f2.prom 2>f2.log || fail "second pull: $(cat f2.log)"
grep -q refused f2.log && fail "refused records logged again: $(cat f2.log)"
ok "RGW: junk far-future record, misnamed key and replayed record skipped; steps 4..6 applied"
