#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# CLI test of `pulse keygen`: --help, the two files and their modes, refusal to overwrite, usage errors.
set -u
: "${PULSE_BIN:?PULSE_BIN must name the pulse binary}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

out=$("$PULSE_BIN" keygen --help) || fail "--help exit status $?"
grep -q '^usage: pulse keygen' <<<"$out" || fail "--help prints no usage"

out=$("$PULSE_BIN" keygen "$T/node1" 2>"$T/err") || fail "keygen exit status $?"
[ -s "$T/err" ] && fail "keygen wrote to stderr: $(cat "$T/err")"
[ "$(stat -c %a "$T/node1.key")" = 600 ] || fail "node1.key mode $(stat -c %a "$T/node1.key")"
[ "$(stat -c %a "$T/node1.pub")" = 644 ] || fail "node1.pub mode $(stat -c %a "$T/node1.pub")"
[ "$(head -n1 "$T/node1.key")" = pulse-ed25519-secret-v1 ] || fail "secret key header"
[ "$(wc -l <"$T/node1.key")" = 2 ] || fail "secret key file is not two lines"
read -r hdr hex comment <"$T/node1.pub"
[ "$hdr" = pulse-ed25519-public-v1 ] || fail "public key header '$hdr'"
[[ $hex =~ ^[0-9a-f]{64}$ ]] || fail "public key hex '$hex'"
[ "$comment" = node1 ] || fail "default comment '$comment'"
grep -q "node id $hex" <<<"$out" || fail "node id not printed: $out"
# The secret key never appears on stdout.
secret=$(sed -n 2p "$T/node1.key")
grep -q "${secret:0:32}" <<<"$out" && fail "secret printed"

# Refuse to overwrite: exit non-zero, one line naming the file, both files unchanged.
before=$(cat "$T/node1.key" "$T/node1.pub" | sha256sum)
if "$PULSE_BIN" keygen "$T/node1" >/dev/null 2>"$T/err"; then fail "overwrote an existing key"; fi
[ "$(wc -l <"$T/err")" = 1 ] || fail "error is not one line: $(cat "$T/err")"
grep -q "node1.*already exists" "$T/err" || fail "error does not name the file: $(cat "$T/err")"
[ "$(cat "$T/node1.key" "$T/node1.pub" | sha256sum)" = "$before" ] || fail "existing key files changed"

# A taken .pub alone also refuses, and no .key is left behind.
echo taken >"$T/n2.pub"
if "$PULSE_BIN" keygen "$T/n2" >/dev/null 2>&1; then fail "overwrote n2.pub"; fi
[ -e "$T/n2.key" ] && fail "n2.key left behind"

# Comment option; distinct keys each time.
"$PULSE_BIN" keygen --comment "trainer A" "$T/n3" >/dev/null || fail "keygen --comment"
[ "$(cut -d' ' -f3- "$T/n3.pub")" = "trainer A" ] || fail "comment not stored: $(cat "$T/n3.pub")"
[ "$(cut -d' ' -f2 "$T/n3.pub")" != "$hex" ] || fail "two keygens gave the same key"

# Usage errors: exit 2, nothing written; a missing directory: exit 1, one line, no files.
"$PULSE_BIN" keygen >/dev/null 2>&1; [ $? = 2 ] || fail "missing NAME is not a usage error"
"$PULSE_BIN" keygen --bogus x >/dev/null 2>&1; [ $? = 2 ] || fail "unknown option is not a usage error"
"$PULSE_BIN" keygen "$T/a" "$T/b" >/dev/null 2>&1; [ $? = 2 ] || fail "two names accepted"
[ -e "$T/a.key" ] && fail "a.key written on a usage error"
"$PULSE_BIN" keygen "$T/nodir/k" >/dev/null 2>"$T/err"; [ $? = 1 ] || fail "missing directory exit status"
[ "$(wc -l <"$T/err")" = 1 ] || fail "missing directory: error not one line"
[ -e "$T/nodir" ] && fail "directory created"

[ $fails = 0 ] && echo "keygen_cli: all checks passed"
exit $((fails != 0))
