#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Context-coded patches (format 5) as every writer wrote them: the committed seeds in
# tests/fuzz/corpus/patch with coding bytes 64 (one rANS state), 65 (two) and 66/67 (count
# tables, what writers write now; one of them of an F16 tensor) apply bit for bit to the
# checkpoints they were made from, in place too, squash with their base, and are refused cleanly
# when damaged; and the format-6 seeds (patches by direction, no longer read) are refused in one
# line that names format 6, the target untouched.
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

# The coding bytes of a patch's chunks that have positions, in chunk order.
codings() {
  python3 - "$SRC/tests/patch/mutate_patch.py" "$1" <<'PY'
import importlib.util, struct, sys
spec = importlib.util.spec_from_file_location("m", sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
b = open(sys.argv[2], "rb").read(); d0 = 104 + struct.unpack_from("<Q", b, 88)[0] + 32
print(" ".join(str(b[d0 + o]) for (e, o, pl, vl) in m.parse(b) if pl))
PY
}

python3 "$SRC/tests/fuzz/patch_seeds.py" --checkpoints "$T"
# seed, its pair, the coding byte its context-coded chunks carry
while read -r seed pair want; do
  p=$C/$seed.patch
  ok "$P" inspect "$p"
  check "grep -q 'format 5,' '$T/out'"
  check "[ \"\$(codings '$p' | cut -d' ' -f1)\" = $want ]"
  ok "$P" apply "$T/$pair-old.safetensors" "$p" -o "$T/r.safetensors"
  check "cmp -s '$T/r.safetensors' '$T/$pair-new.safetensors'"
  cp "$T/$pair-old.safetensors" "$T/inplace.safetensors"
  ok "$P" apply --in-place "$T/inplace.safetensors" "$p"
  check "cmp -s '$T/inplace.safetensors' '$T/$pair-new.safetensors'"
  ok "$P" squash "$p" --base "$T/$pair-old.safetensors" -o "$T/sq"
  ok "$P" apply "$T/$pair-old.safetensors" "$T/sq" -o "$T/r-sq.safetensors"
  check "cmp -s '$T/r-sq.safetensors' '$T/$pair-new.safetensors'"
  # a flipped byte near the end of the last chunk: refused, the in-place target untouched
  cp "$p" "$T/damaged"
  size=$(stat -c %s "$T/damaged")
  byte=$(od -An -tu1 -j $((size - 2)) -N1 "$T/damaged" | tr -d ' ')
  printf "\\x$(printf %02x $((byte ^ 0x5a)))" | dd of="$T/damaged" bs=1 seek=$((size - 2)) conv=notrunc status=none
  cp "$T/$pair-old.safetensors" "$T/target.safetensors"
  bad "$P" apply --in-place "$T/target.safetensors" "$T/damaged"
  check "cmp -s '$T/target.safetensors' '$T/$pair-old.safetensors'"
done <<'EOF'
v5-context ctx 64
v5-context-2states ctx 65
v5-context-counts ctx 67
v5-value-modes wide 64
v5-value-modes-2states wide 65
v5-value-modes-counts wide 67
v5-context-f16 f16 67
v5-value-modes-signs grow 75
EOF

# The format-6 seeds (patches by direction): refused at open by inspect and apply, in one line
# naming the format, the in-place target untouched.
for seed in v6-prev v6-prev-signs; do
  p=$C/$seed.patch
  bad "$P" inspect "$p"
  check "grep -q 'format 6 (patches by direction) is no longer read' '$T/err' && [ \"\$(wc -l <'$T/err')\" = 1 ]"
  cp "$T/ctx-old.safetensors" "$T/target.safetensors"
  bad "$P" apply --in-place "$T/target.safetensors" "$p"
  check "grep -q 'format 6 (patches by direction) is no longer read' '$T/err'"
  check "cmp -s '$T/target.safetensors' '$T/ctx-old.safetensors'"
  bad "$P" apply "$T/ctx-old.safetensors" "$p" -o "$T/r6.safetensors"
  check "[ ! -e '$T/r6.safetensors' ]"
done

# What the writer writes now: count tables and two states; sign symbols where value-mode bands'
# steps mostly grow their weights (the grow pair), raw direction bits where they go either way.
ok "$P" diff "$T/wide-old.safetensors" "$T/wide-new.safetensors" -o "$T/now" --context --chunk 32K
check "[ \"\$(codings '$T/now')\" = 67 ]"
ok "$P" diff "$T/grow-old.safetensors" "$T/grow-new.safetensors" -o "$T/now" --context --chunk 32K
check "[ \"\$(codings '$T/now')\" = 75 ]"

echo "format5: $n checks, $fails failed"
[ "$fails" -eq 0 ]
