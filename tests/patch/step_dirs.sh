#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# CLI test of a step's directions file (`--dirs-out`, `--prev-dirs`): the same file from the diff's
# two checkpoints and from the patch's apply (to a new file, in place, BF16 and F16, chunks that
# split a byte), a format-6 patch coded and applied with it instead of PREV (the same bytes, the
# same result, chained step after step), and refusals (another step's directions, a damaged,
# truncated or foreign file, a directions file that cannot be written) that leave every file as it
# was; inspect and squash given the directions instead of PREV.
set -u
P=${PULSE_BIN:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0; n=0
ok()  { n=$((n+1)); if ! "$@" >"$T/out" 2>"$T/err"; then echo "FAIL (exit $?): $*"; cat "$T/err"; fails=$((fails+1)); fi; }
bad() { verb=$2; n=$((n+1)); if "$@" >"$T/out" 2>"$T/err"; then echo "FAIL (succeeded): $*"; fails=$((fails+1));
        elif [ "$(wc -l <"$T/err")" -ne 1 ] || ! grep -q "^pulse $verb: " "$T/err"; then
          echo "FAIL (not one error line): $*"; cat "$T/err"; fails=$((fails+1)); fi; }
usage() { n=$((n+1)); "$@" >/dev/null 2>"$T/err"; rc=$?
          if [ $rc -ne 2 ]; then echo "FAIL (exit $rc, want 2): $*"; cat "$T/err"; fails=$((fails+1)); fi; }
check() { n=$((n+1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails+1)); fi; }
step() { printf '%s/step-%06d.safetensors' "$1" "$2"; }

for view in bf16 fp16; do
  R=$T/$view
  ok "$P" synth --out "$R" --steps 4 --params 2M --lr 3e-5 --view $view --threads 2
  # The directions of step 0 -> 1: from the diff's two checkpoints, from the patch's apply to a new
  # file and in place; all three the same file. The patch is a plain one (format 4): any patch
  # gives its step's directions.
  ok "$P" diff "$(step "$R" 0)" "$(step "$R" 1)" -o "$T/$view.p01" --dirs-out "$T/$view.d01"
  ok "$P" apply "$(step "$R" 0)" "$T/$view.p01" -o "$T/$view.w1" --dirs-out "$T/$view.d01a"
  check "cmp -s '$T/$view.d01' '$T/$view.d01a' && cmp -s '$T/$view.w1' '$(step "$R" 1)'"
  cp "$(step "$R" 0)" "$T/$view.w"
  ok "$P" apply --in-place "$T/$view.w" "$T/$view.p01" --dirs-out "$T/$view.dirs" --threads 2
  check "cmp -s '$T/$view.d01' '$T/$view.dirs' && cmp -s '$T/$view.w' '$(step "$R" 1)'"
  # two bits an element of the 2M synthetic model, and a head, a table and a digest
  check "[ \$(stat -c %s '$T/$view.d01') -gt 400000 ] && [ \$(stat -c %s '$T/$view.d01') -lt 600000 ]"
  # Each later step: the trainer codes format 6 by the last step's directions, the same bytes as
  # with PREV itself; the follower applies it in place by the directions it kept, and keeps the
  # new step's in the same file.
  for k in 1 2 3; do
    ok "$P" diff "$(step "$R" $k)" "$(step "$R" $((k+1)))" -o "$T/$view.prev.p" --context --prev "$(step "$R" $((k-1)))"
    ok "$P" diff "$(step "$R" $k)" "$(step "$R" $((k+1)))" -o "$T/$view.p" --context --prev-dirs "$T/$view.d01" \
       --dirs-out "$T/$view.d01"
    check "cmp -s '$T/$view.p' '$T/$view.prev.p'"
    check "python3 -c 'import struct,sys; assert struct.unpack_from(\"<I\", open(sys.argv[1],\"rb\").read(), 8)[0] == 6' '$T/$view.p'"
    ok "$P" apply --in-place "$T/$view.w" "$T/$view.p" --prev-dirs "$T/$view.dirs" --dirs-out "$T/$view.dirs"
    check "cmp -s '$T/$view.w' '$(step "$R" $((k+1)))' && cmp -s '$T/$view.dirs' '$T/$view.d01'"
  done
done
# Every directions file above was built in a temporary beside it and renamed there: none is left.
check "[ -z \"\$(ls '$T' | grep -F '.tmp.')\" ]"

R=$T/bf16
S1=$(step "$R" 1) S2=$(step "$R" 2) S3=$(step "$R" 3)
ok "$P" diff "$(step "$R" 0)" "$S1" -o "$T/p01" --dirs-out "$T/d01"
ok "$P" diff "$S1" "$S2" -o "$T/p12" --context --prev-dirs "$T/d01" --dirs-out "$T/d12"
ok "$P" diff "$S2" "$S3" -o "$T/p23" --context --prev-dirs "$T/d12"
ok "$P" apply "$S2" "$T/p23" -o "$T/r3" --prev-dirs "$T/d12"
check "cmp -s '$T/r3' '$S3'"

# inspect and squash take the directions as they take PREV: the same figures, the same squash.
ok "$P" inspect --json "$T/p23" --base "$S2" --prev "$S1"
cp "$T/out" "$T/i.prev"
ok "$P" inspect --json "$T/p23" --base "$S2" --prev-dirs "$T/d12"
check "cmp -s '$T/out' '$T/i.prev' && grep -q vs_bound '$T/out'"
ok "$P" squash "$T/p12" "$T/p23" -o "$T/sq" --base "$S1" --prev-dirs "$T/d01"
ok "$P" apply "$S1" "$T/sq" -o "$T/rsq"
check "cmp -s '$T/rsq' '$S3'"
bad "$P" squash "$T/p12" "$T/p23" -o "$T/sqx" --base "$S1" --prev-dirs "$T/d12"
check "grep -q 'directions are of a step to state' '$T/err' && [ ! -e '$T/sqx' ]"

# Chunks that split a byte of the directions (1001 elements): read on one thread, the same file.
ok "$P" diff "$S1" "$S2" -o "$T/p12c" --chunk 1001 --context --prev-dirs "$T/d01"
ok "$P" apply "$S1" "$T/p12c" -o "$T/r2c" --prev-dirs "$T/d01" --dirs-out "$T/d12c"
check "cmp -s '$T/r2c' '$S2' && cmp -s '$T/d12c' '$T/d12'"

# Refused, one line, nothing written: the directions of another step (coding or decoding), of
# another layout, a damaged file, a truncated one, a patch given as one, a missing one.
cp "$S2" "$T/keep"
bad "$P" apply "$S2" "$T/p23" -o "$T/none" --prev-dirs "$T/d01"
check "grep -q 'directions are of a step to state' '$T/err' && [ ! -e '$T/none' ]"
bad "$P" apply --in-place "$T/keep" "$T/p23" --prev-dirs "$T/d01" --dirs-out "$T/dx"
check "cmp -s '$T/keep' '$S2' && [ ! -e '$T/dx' ]"
bad "$P" diff "$S2" "$S3" -o "$T/none" --context --prev-dirs "$T/d01"
check "grep -q 'directions are of a step to state' '$T/err' && [ ! -e '$T/none' ]"
bad "$P" apply "$S2" "$T/p23" -o "$T/none" --prev-dirs "$T/fp16.d01"
check "grep -q 'the directions' '$T/err' && [ ! -e '$T/none' ]"
python3 -c 'import sys; b=bytearray(open(sys.argv[1],"rb").read()); b[len(b)//2]^=0x04; open(sys.argv[2],"wb").write(b)' "$T/d12" "$T/dam"
bad "$P" apply --in-place "$T/keep" "$T/p23" --prev-dirs "$T/dam"
check "grep -q 'digest mismatch' '$T/err' && cmp -s '$T/keep' '$S2'"
bad "$P" diff "$S2" "$S3" -o "$T/none" --context --prev-dirs "$T/dam"
check "grep -q 'digest mismatch' '$T/err' && [ ! -e '$T/none' ]"
head -c 1000 "$T/d12" > "$T/short"
bad "$P" apply "$S2" "$T/p23" -o "$T/none" --prev-dirs "$T/short"
check "grep -q 'truncated or extended' '$T/err' && [ ! -e '$T/none' ]"
bad "$P" apply "$S2" "$T/p23" -o "$T/none" --prev-dirs "$T/p12"
check "grep -q 'not a directions file' '$T/err' && [ ! -e '$T/none' ]"
bad "$P" apply "$S2" "$T/p23" -o "$T/none" --prev-dirs "$T/missing"
check "[ ! -e '$T/none' ]"
# A format-6 patch with neither PREV nor directions names both ways to give the step.
bad "$P" apply "$S2" "$T/p23" -o "$T/none"
check "grep -q -- '--prev-dirs' '$T/err' && [ ! -e '$T/none' ]"
# A patch of another format does not read --prev-dirs.
ok "$P" apply "$(step "$R" 0)" "$T/p01" -o "$T/r1" --prev-dirs "$T/missing"
check "cmp -s '$T/r1' '$S1'"
# Directions that cannot be written: in place, the apply is undone; to a new file, OUT is not made.
bad "$P" apply --in-place "$T/keep" "$T/p23" --prev-dirs "$T/d12" --dirs-out "$T/no/such/dir/d"
check "grep -q 'directions' '$T/err' && cmp -s '$T/keep' '$S2'"
bad "$P" apply "$S2" "$T/p23" -o "$T/none" --prev-dirs "$T/d12" --dirs-out "$T/no/such/dir/d"
check "[ ! -e '$T/none' ]"
# and the diff says its patch is written but its directions are not
bad "$P" diff "$S2" "$S3" -o "$T/p23b" --dirs-out "$T/no/such/dir/d"
check "grep -q 'directions' '$T/err' && [ -e '$T/p23b' ]"

# Usage: --prev-dirs codes context chunks, and is one of two ways to give the step.
usage "$P" diff "$S2" "$S3" -o "$T/x" --prev-dirs "$T/d12"
usage "$P" diff "$S2" "$S3" -o "$T/x" --context --prev "$S1" --prev-dirs "$T/d12"
usage "$P" apply "$S2" "$T/p23" -o "$T/x" --prev "$S1" --prev-dirs "$T/d12"
usage "$P" apply "$S2" "$T/p23" -o "$T/x" --dirs-out
check "[ ! -e '$T/x' ]"

echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
