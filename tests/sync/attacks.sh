#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Publish/pull end to end and every tampering docs/trust.md names, against file:// ('file') or the test RGW ('s3').
#
# usage: attacks.sh file|s3 FORGE   (FORGE: tests/sync/forge, the record-forging helper)
# A 5-step synthetic trajectory is published; a fresh follower must pull it bit for bit and
# `pulse manifest audit` must pass. Then each attack runs on a fresh copy of the run (file://:
# cp -a of the directory; s3: a new run name, republished) with a follower that holds step 3:
# the pull must fail with one line naming the problem, the follower's weights and index must be
# unchanged, and the audit must name the tampering and exit 1.
set -euo pipefail

mode=${1:?usage: attacks.sh file|s3 FORGE}
forge=${2:?usage: attacks.sh file|s3 FORGE}
forge=$(cd "$(dirname "$forge")" && pwd)/$(basename "$forge")   # the script works in its own directory
: "${PULSE_BIN:?PULSE_BIN must name the pulse binary (meson test sets it)}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Patches of a few tens of KiB uploaded in parts of 4 KiB and up: records of a head and several
# parts, as a large model's are, so that each part is audited under its head and tampered with.
export PULSE_UPLOAD_PART=4096

if [ "$mode" = s3 ]; then
  if [ -z "${PULSE_RGW_ENV:-}" ] || [ ! -f "${PULSE_RGW_ENV:-}" ]; then
    echo "SKIP: PULSE_RGW_ENV is not set to an RGW env file (scripts/test.sh starts one; docs/testing-s3.md)"
    exit 77
  fi
  # shellcheck source=../s3/lib.sh
  . "$here/../s3/lib.sh"   # work, prefix, bucket, fail, ok, cleanup trap; skips without a server
  store_root="s3://$bucket/$prefix"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-sync.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  fail() { echo "FAIL: $*" >&2; exit 1; }
  ok() { echo "ok   $*"; }
fi

# Every pulse call is bounded: a hang is a failure, never a stuck test.
P() { timeout 120 "$PULSE_BIN" "$@"; }
cd "$work"

P keygen --comment trainer trainer >keygen.out
node=$(sed -n 's/^node id //p' keygen.out)
P keygen --comment mallory mallory >/dev/null
P synth --params 1M --steps 5 --out ckpt >/dev/null
last=ckpt/step-000005.safetensors
[ -f "$last" ] || fail "pulse synth wrote no $last"
rec() { printf 'records/sync-patch/%012d/%s' "$1" "$node"; }
keyframe_rec=$(printf 'records/keyframe/%012d/%s' 0 "$node")

# publish STORE RUN STATE FROM TO: steps FROM..TO of the trajectory.
publish() {
  local i
  for i in $(seq "$4" "$5"); do
    P publish --store "$1" --run "$2" --key trainer.key --state "$3" \
      "$(printf 'ckpt/step-%06d.safetensors' "$i")" >/dev/null || fail "publish step $i of run $2"
  done
}
pull() { P pull --store "$1" --run "$2" --trust trainer.pub --state "$3/state" --weights "$3/w.safetensors"; }
held() { "$forge" held "$1/state" "$2"; }
audit() { P manifest audit --store "$1" --run "$2" --trust trainer.pub; }

# build NAME: sets store and run to a run with steps 0..5 published and a follower f-NAME at step 3.
build() {
  if [ "$mode" = s3 ]; then
    store=$store_root
    run=r-$1
  else
    mkdir -p "$work/b-$1"
    store=file://$work/b-$1
    run=r
  fi
  publish "$store" "$run" "$work/t-$1" 0 3
  mkdir -p "$work/f-$1"
  pull "$store" "$run" "$work/f-$1" >/dev/null || fail "follower of $run could not pull to step 3"
  publish "$store" "$run" "$work/t-$1" 4 5
}

# ---- the untouched run ----------------------------------------------------------------------
build base
base_store=$store
run_base=$run
cmp -s "$work/f-base/w.safetensors" ckpt/step-000003.safetensors || fail "follower at step 3 differs from the trainer"
mkdir fresh
pull "$store" "$run" fresh >fresh.out || fail "fresh pull failed: $(cat fresh.out)"
cmp "$last" fresh/w.safetensors || fail "pulled weights differ from the trainer's last checkpoint"
held fresh "$run" | grep -q '^step 5 ' || fail "fresh follower's index does not hold step 5: $(held fresh "$run")"
ok "fresh follower pulled steps 0..5: bit-identical to the trainer's last checkpoint"
audit "$store" "$run" >audit.out 2>audit.err || fail "audit of the untouched run failed: $(cat audit.err)"
grep -q '^ok: every check holds' audit.out || fail "audit of the untouched run did not say ok"
[ ! -s audit.err ] || fail "audit of the untouched run printed problems: $(cat audit.err)"
ok "audit of the untouched run exits 0"
P manifest ls --store "$store" --run "$run" --trust trainer.pub >ls.out
[ "$(grep -c ' trainer ' ls.out)" = 6 ] || fail "manifest ls does not list 6 trusted steps: $(cat ls.out)"
grep -q '^0 *keyframe .*100.00%' ls.out || fail "manifest ls: keyframe density is not 100%"
P manifest ls --store "$store" --run "$run" | grep -q 'UNTRUSTED' || fail "manifest ls without --trust: no UNTRUSTED"
P manifest show --store "$store" --run "$run" --trust trainer.pub 4 | grep -q 'verified     yes, signed by trainer' \
  || fail "manifest show 4 does not verify the record"
ok "manifest ls and show"

# ---- helpers for the attacks ----------------------------------------------------------------
# meson's MALLOC_PERTURB_ made glibc fill the patch codec's per-chunk buffers (about 9 MiB per
# chunk per thread) on every verify: each pull and audit ran 10-20x slower. The untouched run
# above keeps it; the ~40 calls below run without, so the test stays within its time on 2 cores.
unset MALLOC_PERTURB_
# fresh_copy NAME: store/run of an untouched copy and a follower f-NAME at step 3.
fresh_copy() {
  if [ "$mode" = s3 ]; then
    build "$1"
  else
    cp -a "$work/b-base" "$work/b-$1"
    cp -a "$work/f-base" "$work/f-$1"
    store=file://$work/b-$1
    run=r
  fi
}
kget() { P store get "$store/$run/$1" -o "$2" >/dev/null; }
kput() { P store put "$store/$run/$1" "$2" >/dev/null; }
digest_of() {  # the first object digest of the record at REL (a patch's head)
  P manifest show --store "$store" --run "$run" --json "$1" | sed -n 's/.*"objects":\[{"digest":"\([0-9a-f]*\)".*/\1/p'
}
last_digest_of() {  # the last object digest of the record at REL (a patch's last part)
  P manifest show --store "$store" --run "$run" --json "$1" | grep -o '"digest":"[0-9a-f]*"' | tail -1 | cut -d'"' -f4
}
flip_middle() { python3 -c 'import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0x01; open(p, "wb").write(b)' "$1"; }

# expect NAME FOLLOWER PULL-REGEX AUDIT-REGEX: the pull is refused with one line matching PULL-REGEX
# (docs/sync.md: the line names the step and the record key; the reason's wording is the pull's),
# the follower's weights and index are unchanged, the audit exits 1 with a line matching AUDIT-REGEX.
expect() {
  local name=$1 f=$2 pull_re=$3 audit_re=$4 rc before
  before=$(held "$f" "$run")
  if [ -f "$f/w.safetensors" ]; then cp "$f/w.safetensors" "$name.before"; fi
  rc=0
  pull "$store" "$run" "$f" >"$name.pull.out" 2>"$name.pull.err" || rc=$?
  [ "$rc" != 0 ] || fail "$name: pull succeeded: $(cat "$name.pull.out")"
  [ "$rc" != 124 ] || fail "$name: pull hung"
  [ "$(wc -l <"$name.pull.err")" = 1 ] || fail "$name: pull did not print exactly one line on stderr: $(cat "$name.pull.err")"
  grep -Eq -- "$pull_re" "$name.pull.err" || fail "$name: pull error does not name the problem: $(cat "$name.pull.err")"
  if [ -f "$name.before" ]; then
    cmp -s "$name.before" "$f/w.safetensors" || fail "$name: the follower's weights changed"
  else
    [ ! -e "$f/w.safetensors" ] || fail "$name: a weights file was left behind"
  fi
  ls "$f" | grep -q 'pulse-tmp' && fail "$name: a temporary file was left beside the weights"
  [ "$(held "$f" "$run")" = "$before" ] || fail "$name: the follower's index moved from '$before' to '$(held "$f" "$run")'"
  rc=0
  audit "$store" "$run" >"$name.audit.out" 2>"$name.audit.err" || rc=$?
  [ "$rc" = 1 ] || fail "$name: audit exit $rc, wanted 1: $(cat "$name.audit.err")"
  grep -Eq -- "$audit_re" "$name.audit.err" || fail "$name: audit does not name the tampering: $(cat "$name.audit.err")"
  ok "$name: pull refused ($(cat "$name.pull.err")); weights and index unchanged; audit: $(grep -E -m1 -- "$audit_re" "$name.audit.err")"
}

r4=$(rec 4)

# 1. A record signed by an untrusted key, under the trainer's name.
fresh_copy untrusted
"$forge" sign mallory.key "$store" "$run" "$r4" 4 --put-as "$r4" >/dev/null
expect untrusted "$work/f-untrusted" "step 4: $r4" "$r4: not signed by a trusted key"

# 2. One flipped byte in a record.
fresh_copy flip-record
kget "$r4" rec.bin && flip_middle rec.bin && kput "$r4" rec.bin
expect flip-record "$work/f-flip-record" "step 4: $r4" "$r4: (signature does not verify|does not parse)"

# 3. One flipped byte in an object (a patch's head).
fresh_copy flip-object
d4=$(digest_of "$r4")
kget "objects/$d4" obj.bin && flip_middle obj.bin && kput "objects/$d4" obj.bin
expect flip-object "$work/f-flip-object" "step 4: $r4" "objects/$d4: SHA-256 of its bytes"

# 3b. One flipped byte in a part of a patch's data (the head above, a part here).
fresh_copy flip-part
dl=$(last_digest_of "$r4")
kget "objects/$dl" obj.bin && flip_middle obj.bin && kput "objects/$dl" obj.bin
expect flip-part "$work/f-flip-part" "step 4: $r4" "objects/$dl: SHA-256 of its bytes"

# 4. Rollback: an old record (step 2) re-served as step 4, the head moved to it.
fresh_copy rollback
kget "$(rec 2)" rec.bin && kput "$r4" rec.bin
printf '%s\n' "$r4" >head.txt && kput "heads/sync/$node" head.txt
expect rollback "$work/f-rollback" "step 4: $r4" "$r4: the record inside is sync-patch step 2"

# 5. A record (validly signed by the trainer) naming the object of another step.
fresh_copy mix
d2=$(digest_of "$(rec 2)")
"$forge" sign trainer.key "$store" "$run" "$r4" 4 --objects-of "$(rec 2)" >/dev/null
expect mix "$work/f-mix" "step 4: $r4" "objects/$d2: patch goes from"

# 6. An object longer than declared.
fresh_copy longer
d4=$(digest_of "$r4")
kget "objects/$d4" obj.bin && printf 'more bytes' >>obj.bin && kput "objects/$d4" obj.bin
expect longer "$work/f-longer" "step 4: $r4" "objects/$d4: size [0-9]+, record says [0-9]+"

# 7. A record (validly signed by the trainer) whose base is not the follower's state.
fresh_copy wrongbase
"$forge" sign trainer.key "$store" "$run" "$r4" 4 --base-of "$(rec 2)" >/dev/null
expect wrongbase "$work/f-wrongbase" "step 4: $r4" "$r4: base [0-9a-f]+ is the result of step 2, not of step 3"

# 8. A truncated keyframe chunk, met by a follower that starts from nothing.
fresh_copy truncated
dk=$(digest_of "$keyframe_rec")
kget "objects/$dk" obj.bin && truncate -s -100 obj.bin && kput "objects/$dk" obj.bin
mkdir -p "$work/f-new"
expect truncated "$work/f-new" "step 0: $keyframe_rec" "objects/$dk: size [0-9]+, record says [0-9]+"

# ---- what only the audit sees (file:// only: cheap, and the same code on s3) ------------------
if [ "$mode" = file ]; then
  # audit_finds NAME REGEX: the audit of the current copy exits 1 naming REGEX.
  audit_finds() {
    local rc=0
    audit "$store" "$run" >"$1.audit.out" 2>"$1.audit.err" || rc=$?
    [ "$rc" = 1 ] || fail "$1: audit exit $rc, wanted 1: $(cat "$1.audit.err")"
    grep -Eq -- "$2" "$1.audit.err" || fail "$1: audit does not report it: $(cat "$1.audit.err")"
    ok "$1: audit: $(grep -E -m1 -- "$2" "$1.audit.err")"
  }
  fresh_copy orphan
  head -c 1000 /dev/urandom >junk.bin
  dj=$(sha256sum junk.bin | cut -c1-64)
  kput "objects/$dj" junk.bin
  audit_finds orphan "objects/$dj: orphan: no record names it \(1000 bytes\)"

  fresh_copy gap
  P store rm "$store/$run/$(rec 3)" >/dev/null
  audit_finds gap "step 3: no record \(gap in the chain\)"

  fresh_copy stale-head
  printf '%s\n' "$r4" >head.txt && kput "heads/sync/$node" head.txt
  audit_finds stale-head "heads/sync/$node: points to step 4, but step 5 is the node's newest record"

  fresh_copy stranger
  "$forge" sign mallory.key "$store" "$run" "$(rec 5)" 6 >/dev/null
  audit_finds stranger "step 6: records/sync-patch/000000000006/[0-9a-f]+: not signed by a trusted key"

  fresh_copy missing
  P store rm "$store/$run/objects/$(digest_of "$(rec 5)")" >/dev/null
  audit_finds missing "objects/[0-9a-f]+: missing \(named by 1 record\)"
fi

# The attacks never touched the untouched run.
audit "$base_store" "$run_base" >/dev/null 2>&1 || fail "the untouched run no longer audits clean"
ok "the untouched run still audits clean"
