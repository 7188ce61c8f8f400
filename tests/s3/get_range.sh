#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Ranged gets to a file: a range one GET can fetch goes without a HEAD first and gives exactly its
# bytes, checked against the object's SHA-256 when it covers the object; a range past the end, an
# empty object, a server that ignores Range and one that answers other bytes (tests/s3/fakes3.py)
# each give the bytes or one line.
# shellcheck source=tests/s3/lib.sh disable=SC2154  # work, bucket, prefix come from lib.sh
. "$(dirname "$0")/lib.sh"
start_proxy

url="s3://$bucket/$prefix"
head -c 300000 /dev/urandom >"$work/obj"
pulse_store put "$url/obj" "$work/obj" || fail "setup put"
: >"$work/empty"
pulse_store put "$url/empty" "$work/empty" || fail "setup put of the empty object"

# refused WHAT PATTERN CMD...: CMD exits 1 with one line matching PATTERN, and no output file.
refused() {
  local what=$1 pattern=$2 rc=0
  shift 2
  rm -f "$work/got"
  "$@" 2>"$work/err" || rc=$?
  [ "$rc" = 1 ] || fail "$what: exit $rc"
  one_line_error "$work/err"
  grep -q "$pattern" "$work/err" || fail "$what: $(cat "$work/err")"
  [ ! -e "$work/got" ] || fail "$what left an output file"
}

# requests: the proxy's log since the last set_rules, as "METHOD STATUS" lines.
requests() { awk '$1 ~ /^[0-9]+$/ { print $2, $5 }' "$work/proxy.log" | tr '\n' ';'; }

# A range inside the object: one GET, answered 206, exactly bytes 1000..1999.
set_rules
via_proxy pulse_store get "$url/obj" -o "$work/got" --range 1000-1999 || fail "get --range 1000-1999"
dd if="$work/obj" of="$work/want" bs=1000 skip=1 count=1 status=none
cmp -s "$work/got" "$work/want" || fail "--range 1000-1999: wrong bytes"
[ "$(requests)" = "GET 206;" ] || fail "--range 1000-1999 sent: $(requests)"
ok "a range inside the object: one GET, its 1000 bytes"

# A range past the end of the object from 0: one GET, the whole object.
set_rules
via_proxy pulse_store get "$url/obj" -o "$work/got" --range 0-999999 || fail "get --range 0-999999"
cmp -s "$work/got" "$work/obj" || fail "--range 0-999999: not the object"
[ "$(requests)" = "GET 206;" ] || fail "--range 0-999999 sent: $(requests)"
ok "a range covering the object: one GET, the whole object"

# To the end: the extent is unknown, so a HEAD first decides between one GET and parallel ranges.
set_rules
via_proxy pulse_store get "$url/obj" -o "$work/got" --range 100- || fail "get --range 100-"
tail -c +101 "$work/obj" >"$work/want"
cmp -s "$work/got" "$work/want" || fail "--range 100-: wrong bytes"
[ "$(requests)" = "HEAD 200;GET 206;" ] || fail "--range 100- sent: $(requests)"
ok "a range to the end: HEAD, then one GET"

# A range starting at the end: one line naming the size, no output file.
refused "a range past the end" "range starts at 300000, object has 300000 bytes" \
  via_proxy pulse_store get "$url/obj" -o "$work/got" --range 300000-300009
ok "a range past the end: $(cat "$work/err")"

# An empty object: S3 answers a Range on it with 416; from 0 that is an empty file.
via_proxy pulse_store get "$url/empty" -o "$work/got" --range 0-9 || fail "get --range 0-9 of an empty object"
{ [ -f "$work/got" ] && [ ! -s "$work/got" ]; } || fail "an empty object's range is not an empty file"
ok "a range of an empty object: an empty file"

# An object whose stored digest does not match its bytes: a get of the whole object is checked
# against it and refused, on one GET and on parallel ranges; a range the caller names, even one
# that covers the object, is the caller's to check and comes as it is.
sha_of_other=$(printf 'other bytes' | sha256sum | cut -d' ' -f1)
s3 PUT "/$bucket/$prefix/liar" -d "$work/obj" -H "x-amz-meta-pulse-sha256: $sha_of_other" >/dev/null
refused "a whole get of an object failing its digest" "fails its SHA-256" \
  via_proxy pulse_store get "$url/liar" -o "$work/got"
PULSE_S3_MULTIPART_THRESHOLD=100000 PULSE_S3_PART_SIZE=50000 \
  refused "a whole get in parallel ranges of an object failing its digest" "fail the object's SHA-256" \
  via_proxy pulse_store get "$url/liar" -o "$work/got"
via_proxy pulse_store get "$url/liar" -o "$work/got" --range 0-999999 || fail "a covering range of liar"
cmp -s "$work/got" "$work/obj" || fail "--range 0-999999 of liar: not its bytes"
via_proxy pulse_store get "$url/liar" -o "$work/got" --range 10-19 || fail "a part of liar"
dd if="$work/obj" of="$work/want" bs=1 skip=10 count=10 status=none
cmp -s "$work/got" "$work/want" || fail "--range 10-19 of liar: wrong bytes"
ok "the stored SHA-256 is checked on whole gets ($(cat "$work/err")), not on named ranges"

# A range from 0 short of the end, in parallel ranges: its bytes, not checked against the whole
# object's digest.
PULSE_S3_MULTIPART_THRESHOLD=100000 PULSE_S3_PART_SIZE=50000 \
  via_proxy pulse_store get "$url/obj" -o "$work/got" --range 0-199999 || fail "--range 0-199999 in parallel ranges"
head -c 200000 "$work/obj" | cmp -s - "$work/got" || fail "--range 0-199999 in parallel ranges: wrong bytes"
ok "a range from 0 short of the end in parallel ranges: its 200000 bytes"

# The progress line of a one-GET fetch, on a terminal: its total is the object, not the range asked
# for, and a retried transfer never counts past it (the first answer is cut after half its body).
head -c 20000000 /dev/urandom >"$work/big"
pulse_store put "$url/big" "$work/big" || fail "setup put of big"
set_rules "1 GET /$bucket/$prefix/big truncate"
PULSE_PROGRESS_AFTER_MS=0 AWS_ENDPOINT_URL=$proxy_url script -qec \
  "timeout 60 $PULSE_BIN store get $url/big -o $work/got --range 0-49999999" "$work/tty.txt" >/dev/null \
  || fail "get of big through a truncated first answer"
cmp -s "$work/got" "$work/big" || fail "big: not the object"
[ "$(injected truncate)" = 1 ] || fail "the proxy truncated $(injected truncate) answers, not 1"
shown=$(tr '\r' '\n' <"$work/tty.txt" | grep -ao '[0-9.]* / [0-9.]* MiB' | sort -u | tr '\n' ';')
[ -n "$shown" ] || fail "no progress line on a terminal"
echo "$shown" | tr ';' '\n' | awk 'NF { if ($3 != "19.1" || $1 + 0 > $3 + 0) bad = 1 } END { exit bad }' \
  || fail "progress past its total, or not the object's 19.1 MiB: $shown"
ok "a retried one-GET fetch's progress stays within the object's 19.1 MiB: $shown"

# start_fake MODE: tests/s3/fakes3.py in MODE (the one before it stopped); sets $fake to its URL.
fake_pid=""
trap 'kill "$fake_pid" 2>/dev/null || true; cleanup' EXIT
start_fake() {
  if [ -n "$fake_pid" ]; then
    kill "$fake_pid" 2>/dev/null || true
    wait "$fake_pid" 2>/dev/null || true
  fi
  rm -f "$work/fake.port"
  python3 "$s3_dir/fakes3.py" --mode "$1" --port-file "$work/fake.port" --log "$work/fake.log" \
    --time-limit 300 &
  fake_pid=$!
  for _ in $(seq 1 600); do
    [ -s "$work/fake.port" ] && break
    sleep 0.05
  done
  [ -s "$work/fake.port" ] || fail "fakes3.py --mode $1 did not start"
  fake="http://127.0.0.1:$(cat "$work/fake.port")"
}
via_fake() { AWS_ENDPOINT_URL=$fake "$@"; }
python3 -c 'import sys; sys.stdout.buffer.write(bytes(i % 256 for i in range(1000)))' >"$work/fake.obj"

# A server that ignores Range and answers 200 with the whole object (fakes3.py --mode norange).
start_fake norange
refused "a 200 for a range from 10" "ignored the Range header" \
  via_fake pulse_store get "s3://b/k" -o "$work/got" --range 10-19
[ "$(grep -c '^GET ' "$work/fake.log")" = 1 ] || fail "a 200 for a range from 10 was retried"
refused "a 200 with more than a range from 0" "more bytes than the range" \
  via_fake pulse_store get "s3://b/k" -o "$work/got" --range 0-9
via_fake pulse_store get "s3://b/k" -o "$work/got" --range 0-4999 || fail "a 200 within the range"
cmp -s "$work/got" "$work/fake.obj" || fail "a 200 within a range from 0: not the object"
ok "a server that ignores Range: a range from 10 refused, a 200 longer than 0-9 refused, the whole object within 0-4999"

# A server that answers 206 with bytes from elsewhere (fakes3.py --mode wrongrange: always from 0).
start_fake wrongrange
refused "a 206 from byte 0 for a range from 10" "asked for bytes from 10, the answer's Content-Range starts at 0" \
  via_fake pulse_store get "s3://b/k" -o "$work/got" --range 10-19
via_fake pulse_store get "s3://b/k" -o "$work/got" --range 0-9 || fail "a 206 from 0 for a range from 0"
head -c 10 "$work/fake.obj" | cmp -s - "$work/got" || fail "a 206 for 0-9: wrong bytes"
ok "a 206 whose Content-Range starts elsewhere than asked is refused: $(cat "$work/err")"
