#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `-o -` is standard output where the output is a stream (store get) and a one-line error (exit 2) elsewhere; a .pub as --key is named as such.
set -euo pipefail
: "${PULSE_BIN:?PULSE_BIN must name the pulse binary (meson test sets it)}"
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-dash.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok   $*"; }
P() { timeout 120 "$PULSE_BIN" "$@"; }
cd "$work"
P synth --params 100K --steps 2 --out ck --threads 2 >/dev/null
P keygen tr >/dev/null
a=ck/step-000000.safetensors b=ck/step-000001.safetensors

# store get -o -: the object (or its range) on stdout, no file called '-'.
head -c 20000000 /dev/urandom > big   # more than one 16 MiB piece
P store put "file://$work/st/big" big
P store get "file://$work/st/big" -o - > got || fail "store get -o - failed"
cmp got big || fail "store get -o - did not write the object to stdout"
P store get "file://$work/st/big" -o - --range 16777210-16777229 > part || fail "store get -o - --range failed"
cmp part <(tail -c +16777211 big | head -c 20) || fail "store get -o - --range: wrong bytes"
[ ! -e ./- ] || fail "store get -o - created a file named '-'"
ok "store get -o - streams the object and a range to stdout"

# Everywhere else -o - is refused in one line, exit 2, nothing written.
P diff "$a" "$b" -o p01 >/dev/null
refused() {  # refused VERB ARGS...: exit 2, one line on stderr naming '-', no file '-'
  local rc=0
  P "$@" >out.txt 2>err.txt || rc=$?
  [ "$rc" -eq 2 ] || { cat err.txt; fail "'$*' exited $rc, want 2"; }
  [ "$(wc -l <err.txt)" -eq 1 ] && grep -q -- ' -: ' err.txt || { cat err.txt; fail "'$*': want one error line"; }
  [ ! -e ./- ] || fail "'$*' created a file named '-'"
}
refused diff "$a" "$b" -o -
refused apply "$a" p01 -o -
refused squash p01 -o -
refused synth --out - --steps 1 --params 100K
ok "diff, apply, squash, synth refuse -o - in one line, exit 2"

# A .pub as --key: named as a public key, whatever its mode.
for mode in 644 600; do
  chmod "$mode" tr.pub
  rc=0
  P publish --store "file://$work/store" --run r --key tr.pub --state stp "$a" 2>pub.err || rc=$?
  [ "$rc" -ne 0 ] || fail "publish with a .pub key succeeded"
  grep -q 'tr.pub is a public key (.pub); --key needs the secret key file tr.key' pub.err \
    || { cat pub.err; fail "a .pub (mode $mode) as --key is not named as a public key"; }
  grep -q chmod pub.err && fail "a .pub as --key is told to chmod: $(cat pub.err)"
done
[ ! -e store ] || [ -z "$(find store -type f)" ] || fail "a publish with a .pub key wrote to the store"
ok "a .pub given as --key is named as a public key"
