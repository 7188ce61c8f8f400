#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Incomplete multipart uploads against the test RGW: a publisher killed mid-upload and re-run leaves
# none; another publisher's live upload of the same object, aborted meanwhile, ends in "exists" and
# its publish goes on; pulse manifest audit reports them; a publisher's start aborts only uploads
# begun over an hour ago (the sweep run ahead of the clock by tests/s3/stale_uploads).
#
# usage: uploads.sh STALE_UPLOADS
stale=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
store="s3://$bucket/$prefix"
cd "$work"
P() { timeout 120 "$PULSE_BIN" "$@"; }
# Keyframe chunks (about 1.4 MB in all for 1M weights) go multipart, one part each (RGW refuses
# parts under 5 MiB but the last).
export PULSE_S3_MULTIPART_THRESHOLD=128K PULSE_S3_PART_SIZE=5M PULSE_S3_TIMEOUT=30
P keygen --comment trainer trainer >/dev/null
P synth --params 1M --steps 1 --out ckpt >/dev/null
ck=ckpt/step-000000.safetensors
# uploads: the incomplete uploads under the test's prefix, one "KEY UPLOADID" line each (read with
# the tests' own client, not through pulse).
uploads() {
  s3 GET "/$bucket" -q uploads= -q "prefix=$prefix/" -o ups.xml >ups.status
  [ "$(cat ups.status)" = 200 ] || fail "ListMultipartUploads: HTTP $(cat ups.status)"
  python3 - ups.xml <<'PY'
import sys, xml.etree.ElementTree as ET
ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
for u in ET.parse(sys.argv[1]).getroot().iter(ns + "Upload"):
    print(u.find(ns + "Key").text, u.find(ns + "UploadId").text)
PY
}
count() { uploads | wc -l; }
publish() {   # publish STATE [pulse publish options]: the one checkpoint as run r, a keyframe
  local st=$1
  shift
  P publish --store "$store" --run r --key trainer.key --state "$st" "$@" "$ck"
}
start_proxy

# 1. A publisher killed while its keyframe chunks upload (every PUT under objects/ stalls at the
# proxy), then re-run: the re-run aborts the upload the killed one left of the object it writes.
set_rules "* PUT /$bucket/$prefix/r/objects/ stall:60"
# (pulse itself in the background, not a function's subshell, so that kill -9 reaches it)
AWS_ENDPOINT_URL=$proxy_url "$PULSE_BIN" publish --store "$store" --run r --key trainer.key --state t1 "$ck" \
  >/dev/null 2>p1.err &
pid=$!
for _ in $(seq 1 300); do [ "$(count)" -ge 1 ] && break; sleep 0.1; done
[ "$(count)" -ge 1 ] || fail "the publisher began no multipart upload: $(cat p1.err)"
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
left=$(count)
[ "$left" -ge 1 ] || fail "no upload left by the killed publisher"
P manifest audit --store "$store" --run r --trust trainer.pub >a1.out 2>a1.err && fail "audit passed with an upload left"
grep -q "objects/[0-9a-f]*: incomplete multipart upload .* begun 20.*: its parts are stored and billed" a1.err \
  || fail "the audit did not report the incomplete upload: $(cat a1.err)"
grep -q "incomplete uploads $left" a1.out || fail "audit storage line: $(cat a1.out)"
ok "a publisher killed mid-upload leaves $left incomplete upload(s); the audit reports them"
set_rules
publish t1 >/dev/null 2>p2.err || fail "the re-run failed: $(cat p2.err)"
[ "$(count)" = 0 ] || fail "incomplete uploads left after the re-run: $(uploads)"
P manifest audit --store "$store" --run r --trust trainer.pub >a2.out 2>a2.err || fail "audit after the re-run: $(cat a2.err)"
grep -q "incomplete uploads 0" a2.out || fail "audit storage line: $(cat a2.out)"
ok "the re-run completes and aborts the killed publisher's upload: none left, the audit is clean"

# 2. Another publisher of the same checkpoint (same key, another host) is mid-upload when this one
# writes the same object and aborts its upload: that one's parts then find no upload, the object
# is there, so its put ends in "exists" and its publish goes on.
P synth --params 1M --steps 1 --seed 5 --out ckpt2 >/dev/null
ck=ckpt2/step-000001.safetensors
set_rules "* PUT /$bucket/$prefix/r2/objects/ delay:6"
AWS_ENDPOINT_URL=$proxy_url "$PULSE_BIN" publish --store "$store" --run r2 --key trainer.key --state b "$ck" \
  >b.out 2>b.err &
pid=$!
for _ in $(seq 1 300); do uploads | grep -q "/r2/objects/" && break; sleep 0.1; done
uploads | grep -q "/r2/objects/" || fail "publisher b began no upload: $(cat b.err)"
P publish --store "$store" --run r2 --key trainer.key --state a "$ck" >/dev/null 2>a.err || fail "publisher a: $(cat a.err)"
wait "$pid" || fail "publisher b failed once its upload was aborted: $(cat b.err)"
awk '$2 == "PUT" && $5 == 404' "$work/proxy.log" | grep -q . \
  || fail "publisher b's parts never met the aborted upload: $(cat "$work/proxy.log")"
[ "$(count)" = 0 ] || fail "incomplete uploads left: $(uploads)"
P manifest audit --store "$store" --run r2 --trust trainer.pub >/dev/null 2>a3.err || fail "audit of r2: $(cat a3.err)"
ok "a live upload of the same object, aborted by the other publisher, ends in exists: both publishes succeed"
set_rules

# 3. A publisher's start aborts incomplete uploads of its run's objects begun over an hour ago,
# and no younger one (a publish in flight elsewhere).
planted="$prefix/r/objects/$(printf '%064d' 7)"
s3 POST "/$bucket/$planted" -q uploads= >plant.out
[ "$(head -1 plant.out)" = 200 ] || fail "planting an upload: $(cat plant.out)"
P synth --params 1M --steps 2 --out ckpt3 >/dev/null
P publish --store "$store" --run r --key trainer.key --state t1 ckpt3/step-000002.safetensors >/dev/null 2>p3.err \
  || fail "publish over a fresh planted upload: $(cat p3.err)"
uploads | grep -q "^$planted " || fail "a publisher's start aborted an upload begun seconds ago"
[ "$("$stale" "$store" r 600)" = 0 ] || fail "the sweep aborted an upload 10 minutes old"
[ "$("$stale" "$store" r 3700)" = 1 ] || fail "the sweep did not abort an upload over an hour old"
[ "$(count)" = 0 ] || fail "the stale upload is still there: $(uploads)"
ok "a publisher's start leaves an upload seconds old alone and aborts one over an hour old"
