#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# CLI test of `pulse inspect PATCH --base OLD`: the context bound per stream in the table and in
# --json, the output without --base as before, and a base of another layout or state refused.
set -u
P=${PULSE_BIN:?}
SRC=${PULSE_SRC:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0; n=0
ok()  { n=$((n+1)); if ! "$@" >"$T/out" 2>"$T/err"; then echo "FAIL (exit $?): $*"; cat "$T/err"; fails=$((fails+1)); fi; }
bad() { n=$((n+1)); if "$@" >"$T/out" 2>"$T/err"; then echo "FAIL (succeeded): $*"; fails=$((fails+1));
        elif [ "$(wc -l <"$T/err")" -ne 1 ] || ! grep -q "^pulse inspect: " "$T/err"; then
          echo "FAIL (not one error line): $*"; cat "$T/err"; fails=$((fails+1)); fi; }
check() { n=$((n+1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails+1)); fi; }

for s in 0 1; do python3 "$SRC/tests/patch/mkckpt.py" "$T/s$s.safetensors" 7 $s; done
python3 "$SRC/tests/patch/mkckpt.py" "$T/other.safetensors" 7 0 wide
ok "$P" diff "$T/s0.safetensors" "$T/s1.safetensors" -o "$T/ulp" --chunk 512
ok "$P" diff "$T/s0.safetensors" "$T/s1.safetensors" -o "$T/abs" --values abs

# Without --base: nothing about context.
ok "$P" inspect "$T/ulp"
check "! grep -q 'ctx/order-0' '$T/out'"
ok "$P" inspect --json "$T/ulp"
check "! grep -q '\"context\"' '$T/out'"

# With it: the stream table, a ctx column per tensor, and the same figures in --json.
ok "$P" inspect "$T/ulp" --base "$T/s0.safetensors"
check "grep -q 'ctx/order-0' '$T/out'"
check "grep -Eq '^  positions +[0-9]+ ' '$T/out' && grep -Eq '^  values +[0-9]+ ' '$T/out' && grep -Eq '^  total +[0-9]+ ' '$T/out'"
check "grep -Eq '^tensor .* ctx$' '$T/out'"
ok "$P" inspect --json --base "$T/s0.safetensors" "$T/ulp"
check "python3 - '$T/out' <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c = d['total']['context']
assert c['changes'] == d['total']['changes'] > 0, c
# order-0 of gaps + ulp symbols is inspect's own bound for a ulp patch
o0 = c['positions']['order0_bits'] + c['values']['order0_bits']
assert abs(o0 - d['total']['entropy_bits']) <= 1e-3 * o0 + 1, (o0, d['total']['entropy_bits'])
for s in ('positions', 'values', 'total'):
    r = c[s]['context_vs_order0']
    assert 0 < r <= 1.0001, (s, r)   # an empirical conditional entropy is never above the order-0 one
emb = [t for t in d['tensors'] if t['name'] == 'emb.weight'][0]
assert emb['context']['changes'] == emb['changes'] > 0
ids = [t for t in d['tensors'] if t['name'] == 'ids'][0]
assert 'context' not in ids     # OPAQUE: no exponent
PY"
# An abs patch: the ulp symbols come from the base, the same figures as the ulp patch.
ok "$P" inspect --json --base "$T/s0.safetensors" "$T/abs"
cp "$T/out" "$T/abs.json"
ok "$P" inspect --json --base "$T/s0.safetensors" "$T/ulp"
check "python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))[\"total\"][\"context\"]; u=json.load(open(sys.argv[2]))[\"total\"][\"context\"]; assert abs(a[\"values\"][\"context_bits\"]-u[\"values\"][\"context_bits\"])<1e-3 and abs(a[\"positions\"][\"context_bits\"]-u[\"positions\"][\"context_bits\"])<1e-3' '$T/abs.json' '$T/out'"
ok "$P" inspect --base "$T/s0.safetensors" "$T/abs"
check "grep -q 'not the abs values' '$T/out'"

# Refusals: one line naming what is wrong, nothing on stdout.
bad "$P" inspect "$T/ulp" --base "$T/other.safetensors"
check "grep -q 'layout' '$T/err' && grep -q 'emb.weight' '$T/err' && [ ! -s '$T/out' ]"
# Another state of the same layout: OLD with norm.weight's last byte changed (an element-wise
# tensor, so every chunk decodes: the state id catches it); s1, whose I64 bytes differ from the
# patch's account of them.
python3 -c 'import sys; b=bytearray(open(sys.argv[1],"rb").read()); b[-1]^=1; open(sys.argv[2],"wb").write(b)' \
  "$T/s0.safetensors" "$T/near.safetensors"
bad "$P" inspect "$T/ulp" --base "$T/near.safetensors"
check "grep -q \"not the patch's base\" '$T/err' && [ ! -s '$T/out' ]"
bad "$P" inspect "$T/ulp" --base "$T/s1.safetensors"
check "grep -q \"base state\" '$T/err' && [ ! -s '$T/out' ]"
bad "$P" inspect "$T/ulp" --base "$T/missing.safetensors"
n=$((n+1)); if "$P" inspect "$T/ulp" --base >/dev/null 2>&1; then echo "FAIL: --base without a path"; fails=$((fails+1)); fi

echo "$((n-fails)) of $n checks passed"
[ $fails -eq 0 ]
