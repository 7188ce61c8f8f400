#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# CLI test of context-coded patches (format 5, `pulse diff --context`): bit-identical applies to a
# new file and in place, smaller than the context-free patch on a training step, and refusals
# (damaged chunk, wrong base, abs values); squash with the base that leave every file as it was.
set -u
P=${PULSE_BIN:?}
SRC=${PULSE_SRC:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0; n=0
ok()  { n=$((n+1)); if ! "$@" >"$T/out" 2>"$T/err"; then echo "FAIL (exit $?): $*"; cat "$T/err"; fails=$((fails+1)); fi; }
bad() { verb=$2; n=$((n+1)); if "$@" >"$T/out" 2>"$T/err"; then echo "FAIL (succeeded): $*"; fails=$((fails+1));
        elif [ "$(wc -l <"$T/err")" -ne 1 ] || ! grep -q "^pulse $verb: " "$T/err"; then
          echo "FAIL (not one error line): $*"; cat "$T/err"; fails=$((fails+1)); fi; }
check() { n=$((n+1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails+1)); fi; }
version() { python3 -c 'import struct,sys; print(struct.unpack_from("<I", open(sys.argv[1],"rb").read(), 8)[0])' "$1"; }

# A Llama-shaped training step (BF16 weights under Adam): where the context pays.
ok "$P" synth --out "$T/run" --steps 2 --params 20M --threads 2
S0=$T/run/step-000000.safetensors S1=$T/run/step-000001.safetensors S2=$T/run/step-000002.safetensors
ok "$P" diff "$S0" "$S1" -o "$T/plain"
ok "$P" diff "$S0" "$S1" -o "$T/ctx" --context
check "[ \"\$(version '$T/ctx')\" = 5 ] && [ \"\$(version '$T/plain')\" = 4 ]"
# Smaller than the context-free patch of the same step (the order-0 coder is at its floor, so
# this holds only if the exponent context is used).
check "[ \$(stat -c %s '$T/ctx') -lt \$(stat -c %s '$T/plain') ]"
ok "$P" apply "$S0" "$T/ctx" -o "$T/r1.safetensors"
check "cmp -s '$T/r1.safetensors' '$S1'"
cp "$S0" "$T/inplace.safetensors"
ok "$P" apply --in-place "$T/inplace.safetensors" "$T/ctx"
check "cmp -s '$T/inplace.safetensors' '$S1'"
# A second step on top, and with chunks much smaller than a tensor (each coded the smaller way).
ok "$P" diff "$S1" "$S2" -o "$T/ctx2" --context --threads 2
ok "$P" apply "$T/r1.safetensors" "$T/ctx2" -o "$T/r2.safetensors" --threads 2
check "cmp -s '$T/r2.safetensors' '$S2'"
ok "$P" diff "$S1" "$S2" -o "$T/ctx2s" --context --chunk 4096 --threads 2
ok "$P" apply "$S1" "$T/ctx2s" -o "$T/r2s.safetensors" --threads 2
check "cmp -s '$T/r2s.safetensors' '$S2'"
# inspect: without the base no order-0 bound (null), with it the bound of the decoded changes,
# which the context-coded streams are below (the order-0 coder of format 4 is at 1.01x of it).
ok "$P" inspect "$T/ctx2"
check "grep -q 'order-0 bound n/a' '$T/out'"
ok "$P" inspect --json "$T/ctx2"
check "python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))[\"total\"]; assert t[\"vs_bound\"] is None and t[\"entropy_bits\"] is None, t' '$T/out'"
ok "$P" inspect --json "$T/ctx" --base "$S0"
check "python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))[\"total\"]; assert 0 < t[\"vs_bound\"] < 0.8, t[\"vs_bound\"]' '$T/out'"
ok "$P" inspect --json "$T/plain" --base "$S0"
check "python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))[\"total\"]; assert t[\"vs_bound\"] > 0.95, t[\"vs_bound\"]' '$T/out'"

# Two steps X0 -> X1 -> X2 of a run, patches named after prefix x: the first context-coded
# patch (format 5) under 3/4 of the format-4 one, and applies to a new file, in place and
# squashed with the base, bit-identical.
two_steps() {
  local x=$1 X0=$2 X1=$3 X2=$4
  ok "$P" diff "$X0" "$X1" -o "$T/${x}plain"
  ok "$P" diff "$X0" "$X1" -o "$T/${x}ctx" --context
  ok "$P" diff "$X1" "$X2" -o "$T/${x}ctx2" --context
  check "[ \"\$(version '$T/${x}ctx')\" = 5 ] && [ \$((\$(stat -c %s '$T/${x}ctx') * 4)) -lt \$((\$(stat -c %s '$T/${x}plain') * 3)) ]"
  ok "$P" apply "$X0" "$T/${x}ctx" -o "$T/${x}r1.safetensors"
  check "cmp -s '$T/${x}r1.safetensors' '$X1'"
  cp "$X1" "$T/${x}inplace.safetensors"
  ok "$P" apply --in-place "$T/${x}inplace.safetensors" "$T/${x}ctx2"
  check "cmp -s '$T/${x}inplace.safetensors' '$X2'"
  ok "$P" squash "$T/${x}ctx" "$T/${x}ctx2" -o "$T/${x}sq" --base "$X0"
  ok "$P" apply "$X0" "$T/${x}sq" -o "$T/${x}rsq.safetensors"
  check "cmp -s '$T/${x}rsq.safetensors' '$X2'"
}

# Weights spread over 16 binades (--spread): the bands take the value modes (|d| around a centre,
# new magnitudes around one); applies, in place and squashed, stay bit-identical, and the patch
# is well under the format-4 one.
ok "$P" synth --out "$T/wide" --steps 2 --params 4M --spread 16 --threads 2
W0=$T/wide/step-000000.safetensors W1=$T/wide/step-000001.safetensors W2=$T/wide/step-000002.safetensors
two_steps w "$W0" "$W1" "$W2"

# Mixed dtypes (BF16 coded by context; F32, I64 and packed tensors as in format 4).
for s in 0 1; do python3 "$SRC/tests/patch/mkckpt.py" "$T/m$s.safetensors" 7 $s packed; done
ok "$P" diff "$T/m0.safetensors" "$T/m1.safetensors" -o "$T/mctx" --context --chunk 333
ok "$P" apply "$T/m0.safetensors" "$T/mctx" -o "$T/mr.safetensors"
check "cmp -s '$T/mr.safetensors' '$T/m1.safetensors'"

# F16 weights (bands by F16's 5-bit exponent): three steps of a sign update whose size is a
# fraction of the weights' spread, so that the exponent predicts which weights move; the patch
# is well under the format-4 one, and applies, in place and squashed, are bit-identical.
python3 - "$T" <<'PY'
import json, random, struct, sys
def save(path, vals):
    raw = struct.pack('<%de' % len(vals), *vals)
    hdr = json.dumps({'w': {'dtype': 'F16', 'shape': [200, 500], 'data_offsets': [0, len(raw)]}}).encode()
    hdr += b' ' * (-len(hdr) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(hdr)) + hdr + raw)
rng = random.Random(5)
w = [rng.gauss(0, 1) * 2.0 ** -rng.randint(0, 12) for _ in range(100000)]
for step in range(3):
    save('%s/h%d.safetensors' % (sys.argv[1], step), w)
    w = [x - 2e-5 * (1 if rng.random() < 0.7 else -1) for x in w]
PY
H0=$T/h0.safetensors H1=$T/h1.safetensors H2=$T/h2.safetensors
two_steps h "$H0" "$H1" "$H2"
ok "$P" inspect --json "$T/hctx" --base "$H0"
check "python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))[\"total\"]; assert 0 < t[\"vs_bound\"] < 0.8, t[\"vs_bound\"]' '$T/out'"
bad "$P" apply "$H1" "$T/hctx" -o "$T/hwrong.safetensors"
check "[ ! -e '$T/hwrong.safetensors' ]"

# Refusals: one line, nothing written, the target as it was.
n=$((n+1)); if "$P" diff "$S0" "$S1" -o "$T/absctx" --context --values abs 2>"$T/err"; then echo "FAIL: --context --values abs accepted"; fails=$((fails+1)); fi
check "[ ! -e '$T/absctx' ] && grep -q -- '--context codes ulp values' '$T/err'"
bad "$P" apply "$S1" "$T/ctx" -o "$T/wrong.safetensors"
check "[ ! -e '$T/wrong.safetensors' ] && grep -q 'base' '$T/err'"
# Squash and catch-up: with the base at hand each patch decodes against the state it starts from.
ok "$P" squash "$T/ctx" "$T/ctx2" -o "$T/sq" --base "$S0"
ok "$P" apply "$S0" "$T/sq" -o "$T/rsq.safetensors"
check "cmp -s '$T/rsq.safetensors' '$S2'"
ok "$P" squash "$T/ctx" -o "$T/sq1" --base "$S0"
ok "$P" apply "$S0" "$T/sq1" -o "$T/rsq1.safetensors"
check "cmp -s '$T/rsq1.safetensors' '$S1'"
bad "$P" squash "$T/ctx" "$T/ctx2" -o "$T/sqx"
check "grep -q 'base' '$T/err' && [ ! -e '$T/sqx' ]"
# A damaged byte in the last chunk's streams: its digest refuses it before anything is written.
cp "$T/ctx" "$T/dmg"
python3 -c 'import sys; b=bytearray(open(sys.argv[1],"rb").read()); b[-3]^=0x10; open(sys.argv[1],"wb").write(b)' "$T/dmg"
cp "$S0" "$T/keep.safetensors"
bad "$P" apply --in-place "$T/keep.safetensors" "$T/dmg"
check "cmp -s '$T/keep.safetensors' '$S0' && grep -q 'chunk' '$T/err'"

echo "$((n-fails)) of $n checks passed"
[ $fails -eq 0 ]
