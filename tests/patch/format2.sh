#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Patches of format 2 (zstd positions, no coding byte), as the previous release wrote them: the
# committed seeds in tests/fuzz/corpus/patch apply bit for bit to the checkpoints they were made
# from, squash into format 4, and are refused cleanly when damaged.
set -u
P=${PULSE_BIN:?}
SRC=${PULSE_SRC:?}
C=$SRC/tests/fuzz/corpus/patch
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0; n=0
ok()  { n=$((n+1)); if ! "$@" >"$T/out" 2>"$T/err"; then echo "FAIL (exit $?): $*"; cat "$T/err"; fails=$((fails+1)); fi; }
bad() { n=$((n+1)); if "$@" >"$T/out" 2>"$T/err"; then echo "FAIL (succeeded): $*"; fails=$((fails+1));
        elif ! grep -q "^pulse " "$T/err"; then echo "FAIL (no error line): $*"; fails=$((fails+1)); fi; }
check() { n=$((n+1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails+1)); fi; }

python3 "$SRC/tests/fuzz/patch_seeds.py" --checkpoints "$T"
for p in multi-ulp multi-abs; do
  ok "$P" inspect "$C/v2-$p.patch"
  check "grep -q 'format 2,' '$T/out'"
  ok "$P" apply "$T/old.safetensors" "$C/v2-$p.patch" -o "$T/r-$p.safetensors"
  check "cmp -s '$T/r-$p.safetensors' '$T/new.safetensors'"
done
cp "$T/old.safetensors" "$T/inplace.safetensors"
ok "$P" apply --in-place "$T/inplace.safetensors" "$C/v2-multi-ulp.patch"
check "cmp -s '$T/inplace.safetensors' '$T/new.safetensors'"
ok "$P" apply "$T/old.safetensors" "$C/v2-squashed-multi.patch" -o "$T/r-sq.safetensors"
check "cmp -s '$T/r-sq.safetensors' '$T/new2.safetensors'"

# Squashed into format 4: one ulp patch with its base (its position frames copied, a coding
# byte added), and a format-2 abs patch followed by a format-4 one.
ok "$P" squash "$C/v2-multi-ulp.patch" --base "$T/old.safetensors" -o "$T/sq1"
ok "$P" inspect "$T/sq1"
check "grep -q 'format 4,' '$T/out'"
ok "$P" apply "$T/old.safetensors" "$T/sq1" -o "$T/r-sq1.safetensors"
check "cmp -s '$T/r-sq1.safetensors' '$T/new.safetensors'"
ok "$P" diff "$T/new.safetensors" "$T/new2.safetensors" -o "$T/step2" --values abs --chunk 1K
ok "$P" squash "$C/v2-multi-abs.patch" "$T/step2" -o "$T/sq2"
ok "$P" apply "$T/old.safetensors" "$T/sq2" -o "$T/r-sq2.safetensors"
check "cmp -s '$T/r-sq2.safetensors' '$T/new2.safetensors'"

# A flipped byte in the last chunk's bytes: refused, the in-place target untouched.
cp "$C/v2-multi-ulp.patch" "$T/damaged"
size=$(stat -c %s "$T/damaged")
printf '\x5a' | dd of="$T/damaged" bs=1 seek=$((size - 3)) conv=notrunc status=none
cp "$T/old.safetensors" "$T/target.safetensors"
bad "$P" apply --in-place "$T/target.safetensors" "$T/damaged"
check "cmp -s '$T/target.safetensors' '$T/old.safetensors'"

echo "format2: $n checks, $fails failed"
[ "$fails" -eq 0 ]
