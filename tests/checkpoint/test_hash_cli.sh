#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# `pulse hash`: a good file, a missing file, a malformed file, bad usage, --help.
set -u
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A good file written byte by byte: header {"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}.
hdr='{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
printf "\\x$(printf %02x ${#hdr})\\x00\\x00\\x00\\x00\\x00\\x00\\x00%s\\x00\\x00\\x80\\x3f\\x00\\x00\\x00\\x40" \
    "$hdr" > "$tmp/good.safetensors"

out=$("$PULSE_BIN" hash "$tmp/good.safetensors" 2>"$tmp/err"); rc=$?
if [ $rc -eq 0 ] && [[ "$out" =~ ^[0-9a-f]{64}$ ]] && [ ! -s "$tmp/err" ]; then ok "good file"; else bad "good file: rc=$rc out=$out"; fi
out2=$("$PULSE_BIN" hash --threads 1 "$tmp/good.safetensors")
[ "$out" = "$out2" ] && ok "same id on 1 thread" || bad "id depends on threads"
lines=$("$PULSE_BIN" hash --tensors "$tmp/good.safetensors")
if [ "$(echo "$lines" | wc -l)" -eq 2 ] && echo "$lines" | tail -1 | grep -Eq '^[0-9a-f]{64} F32 +\[2\] w$'; then
    ok "--tensors"; else bad "--tensors: $lines"; fi

# Errors: exactly one line on stderr naming the file, non-zero exit, nothing on stdout.
expect_error() {   # label, pattern, args...
    local label=$1 pattern=$2; shift 2
    "$PULSE_BIN" hash "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    local n; n=$(wc -l <"$tmp/err")
    if [ $rc -ne 0 ] && [ "$n" -eq 1 ] && grep -q -- "$pattern" "$tmp/err" && [ ! -s "$tmp/out" ]; then
        ok "$label"
    else
        bad "$label: rc=$rc lines=$n stderr=$(cat "$tmp/err")"
    fi
}
expect_error "missing file" "$tmp/missing.safetensors" "$tmp/missing.safetensors"
head -c 20 "$tmp/good.safetensors" > "$tmp/cut.safetensors"
expect_error "truncated file" "cut.safetensors" "$tmp/cut.safetensors"
printf '\x02\x00\x00\x00\x00\x00\x00\x00{x' > "$tmp/json.safetensors"
expect_error "bad JSON" "json.safetensors" "$tmp/json.safetensors"

# Usage errors print the reason, then a hint line, and exit 2.
expect_usage() {   # label, pattern, args...
    local label=$1 pattern=$2; shift 2
    "$PULSE_BIN" hash "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    if [ $rc -eq 2 ] && head -1 "$tmp/err" | grep -q -- "$pattern" && grep -q "pulse hash --help" "$tmp/err"; then
        ok "$label"
    else
        bad "$label: rc=$rc stderr=$(cat "$tmp/err")"
    fi
}
expect_usage "unknown option" "--bogus" --bogus "$tmp/good.safetensors"
expect_usage "bad --threads" "threads" --threads zero "$tmp/good.safetensors"
expect_usage "two checkpoints" "one checkpoint" "$tmp/good.safetensors" "$tmp/good.safetensors"
expect_usage "no argument" "no checkpoint"

out=$("$PULSE_BIN" hash --help); rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "usage: pulse hash" && ok "--help" || bad "--help: rc=$rc"
exit $fail
