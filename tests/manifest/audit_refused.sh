#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `pulse manifest audit` never downloads an object that only a refused (unverified) record names.
#
# usage: audit_refused.sh FORGE_UNSIGNED
# A clean 3-step run with a 64 MiB sparse orphan object, then an unsigned record under the
# trainer's key naming that object with its listed size: the audit reports the record and the
# object ("named only by a refused record ... not downloaded") and reads no more than with the
# object a plain orphan (rchar of /proc/PID/io of a shell, which includes its reaped children).
set -euo pipefail

forge=${1:?usage: audit_refused.sh FORGE_UNSIGNED}
forge=$(cd "$(dirname "$forge")" && pwd)/$(basename "$forge")
: "${PULSE_BIN:?PULSE_BIN must name the pulse binary (meson test sets it)}"
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-audit-refused.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok   $*"; }
P() { timeout 120 "$PULSE_BIN" "$@"; }
cd "$work"

P synth --params 1M --steps 2 --out ck --threads 2 >/dev/null
P keygen tr >/dev/null
node=$(sed -n 's/^pulse-ed25519-public-v1 \([0-9a-f]*\).*/\1/p' tr.pub)
store="file://$work/store"
for s in 0 1 2; do
  P publish --store "$store" --run r --key tr.key --state st "ck/step-00000$s.safetensors" >/dev/null
done
P manifest audit --store "$store" --run r --trust tr.pub >clean.out 2>clean.err || { cat clean.err; fail "clean run does not audit"; }
# file:// has no multipart uploads: the storage line says so (s3: tests/s3/uploads.sh)
grep -q "incomplete uploads none (file:// has no multipart uploads)" clean.out || fail "storage line: $(cat clean.out)"

# Bytes the audit reads (all read()/pread() calls, page cache or not).
audit_rchar() {
  bash -c '"$@" >/dev/null 2>audit.err; echo "rc=$?" > audit.rc; sed -n "s/^rchar: //p" /proc/$$/io' _ \
    timeout 300 "$PULSE_BIN" manifest audit --store "$store" --run r --trust tr.pub
}
# The baseline holds the 64 MiB object as a plain orphan: a file:// LIST may hash an object to
# give its ETag, which is the store's cost, not the audit's download.
big=$(printf big | sha256sum | cut -c1-64)
truncate -s 64M "store/r/objects/$big"
base=$(audit_rchar)
grep -q "objects/$big: orphan: no record names it (67108864 bytes)" audit.err || { cat audit.err; fail "no orphan line"; }
ok "audit with the 64 MiB orphan reads $base bytes"

rel=$("$forge" "$store" r "$node" 3 "$big" 67108864)
read_bytes=$(audit_rchar)
cat audit.err
[ "$read_bytes" -lt $((base + 16 * 1048576)) ] \
  || fail "the audit read $read_bytes bytes (with the object a plain orphan: $base): it downloaded the 64 MiB object of a refused record"
grep -q '^rc=1$' audit.rc || fail "audit of a run with an unsigned record: $(cat audit.rc), want 1"
grep -q "step 3: $rel: signature does not verify" audit.err || fail "the unsigned record is not reported"
grep -q "objects/$big: orphan: named only by a refused record ($rel), not downloaded (67108864 bytes)" audit.err \
  || fail "the object of the refused record is not reported as such"
ok "the refused record's 64 MiB object is reported, not downloaded ($read_bytes bytes read)"
