#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# CLI test of pulse diff/apply/inspect/squash on small real checkpoints: round trips,
# one-line errors, no partial output, in-place targets untouched on refusal.
set -u
P=${PULSE_BIN:?}
SRC=${PULSE_SRC:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0; n=0
ok()  { n=$((n+1)); if ! "$@" >"$T/out" 2>"$T/err"; then echo "FAIL (exit $?): $*"; cat "$T/err"; fails=$((fails+1)); fi; }
bad() { n=$((n+1)); if "$@" >"$T/out" 2>"$T/err"; then echo "FAIL (succeeded): $*"; fails=$((fails+1));
        elif [ "$(wc -l <"$T/err")" -lt 1 ] || ! grep -q "^pulse " "$T/err"; then echo "FAIL (no error line): $*"; fails=$((fails+1)); fi; }
check() { n=$((n+1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails+1)); fi; }

for s in 0 1 2; do python3 "$SRC/tests/patch/mkckpt.py" "$T/s$s.safetensors" 7 $s; done
python3 "$SRC/tests/patch/mkckpt.py" "$T/other.safetensors" 7 0 wide

for v in verb diff apply inspect squash; do [ $v = verb ] && continue; ok "$P" $v --help; check "grep -q usage '$T/out'"; done

ok "$P" diff "$T/s0.safetensors" "$T/s1.safetensors" -o "$T/ulp" --chunk 512
check "grep -q 'changes of 2017 elements (.*) and 1 changed byte in opaque tensors' '$T/out'"
ok "$P" diff "$T/s0.safetensors" "$T/s1.safetensors" -o "$T/abs" --values abs --level 19 --threads 1
ok "$P" diff "$T/s1.safetensors" "$T/s2.safetensors" -o "$T/ulp12" --chunk 512
for p in ulp abs; do
  ok "$P" apply "$T/s0.safetensors" "$T/$p" -o "$T/r-$p.safetensors"
  check "cmp -s '$T/r-$p.safetensors' '$T/s1.safetensors'"
done
cp "$T/s0.safetensors" "$T/inplace.safetensors"
ok "$P" apply --in-place "$T/inplace.safetensors" "$T/ulp"
check "cmp -s '$T/inplace.safetensors' '$T/s1.safetensors'"
check "[ \"\$('$P' hash '$T/inplace.safetensors')\" = \"\$('$P' hash '$T/s1.safetensors')\" ]"

ok "$P" inspect "$T/ulp"
check "grep -q 'order-0 bound' '$T/out'"
ok "$P" inspect --json "$T/ulp"
check "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d[\"total\"][\"changes\"]>0' '$T/out'"

# Squash: abs patches alone; ulp ones with --base.
ok "$P" diff "$T/s1.safetensors" "$T/s2.safetensors" -o "$T/abs12" --values abs
ok "$P" squash "$T/abs" "$T/abs12" -o "$T/sq-abs"
ok "$P" apply "$T/s0.safetensors" "$T/sq-abs" -o "$T/r-sq.safetensors"
check "cmp -s '$T/r-sq.safetensors' '$T/s2.safetensors'"
bad "$P" squash "$T/ulp" "$T/ulp12" -o "$T/sq-ulp"
check "[ ! -e '$T/sq-ulp' ]"
bad "$P" squash "$T/ulp12" "$T/ulp" -o "$T/sq-ulp" --base "$T/s0.safetensors"
ok "$P" squash "$T/ulp" "$T/ulp12" -o "$T/sq-ulp" --base "$T/s0.safetensors"
ok "$P" apply "$T/s0.safetensors" "$T/sq-ulp" -o "$T/r-sq2.safetensors"
check "cmp -s '$T/r-sq2.safetensors' '$T/s2.safetensors'"

# Refusals: wrong base, layout change, damaged and truncated patches, unwritable output.
cp "$T/s2.safetensors" "$T/keep.safetensors"
bad "$P" apply --in-place "$T/keep.safetensors" "$T/ulp"
check "grep -q 'base' '$T/err' && cmp -s '$T/keep.safetensors' '$T/s2.safetensors'"
bad "$P" apply "$T/s2.safetensors" "$T/ulp" -o "$T/no1.safetensors"
check "[ -z \"\$(ls '$T' | grep no1)\" ]"
bad "$P" diff "$T/s0.safetensors" "$T/other.safetensors" -o "$T/no2"
check "grep -q 'layout changed' '$T/err' && [ ! -e '$T/no2' ]"
size=$(stat -c %s "$T/ulp")
head -c $((size - 1)) "$T/ulp" > "$T/trunc"
cp "$T/s0.safetensors" "$T/keep0.safetensors"
bad "$P" apply --in-place "$T/keep0.safetensors" "$T/trunc"
check "cmp -s '$T/keep0.safetensors' '$T/s0.safetensors'"
cp "$T/ulp" "$T/flip"
python3 -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[-3] ^= 0xff; open(p, "wb").write(b)' "$T/flip"   # really changed, whatever the byte was
bad "$P" apply --in-place "$T/keep0.safetensors" "$T/flip"
check "grep -q 'digest' '$T/err' && cmp -s '$T/keep0.safetensors' '$T/s0.safetensors'"
bad "$P" apply "$T/s0.safetensors" "$T/flip" -o "$T/no3.safetensors"
check "[ -z \"\$(ls '$T' | grep no3)\" ]"
bad "$P" inspect "$T/flip"
bad "$P" diff "$T/s0.safetensors" "$T/s1.safetensors" -o "$T/nodir/x"
check "[ ! -e '$T/nodir' ]"
bad "$P" apply "$T/s0.safetensors" "$T/ulp" -o "$T/nodir/x.safetensors"
mkdir "$T/outdir"   # an output that is a directory is refused before the work, nothing left beside it
bad "$P" diff "$T/s0.safetensors" "$T/s1.safetensors" -o "$T/outdir"
check "grep -q 'outdir is a directory' '$T/err' && [ -z \"\$(ls '$T' | grep 'outdir.tmp')\" ] && [ -z \"\$(ls -A '$T/outdir')\" ]"
bad "$P" diff "$T/s0.safetensors"
bad "$P" diff "$T/s0.safetensors" "$T/s1.safetensors" -o "$T/x" --values bogus
bad "$P" apply "$T/s0.safetensors" "$T/ulp"
bad "$P" inspect "$T/missing"

echo "$n passed minus $fails failed"
[ $fails -eq 0 ]
