#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# NEW rewritten between the diff's plan and its coding (an LD_PRELOAD shim copies OLD's bytes
# of one changed chunk into NEW when the patch writer creates its temporary, right after the
# plan): the chunk the plan saw as changed now codes to no change, and the diff must stop with
# one line naming the tensor, leaving no output and no temporary behind.
set -u
P=${PULSE_BIN:?}
SRC=${PULSE_SRC:?}
SHIM=${PULSE_CHANGE_ON_CREATE:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0; n=0
check() { n=$((n+1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails+1)); fi; }

python3 "$SRC/tests/patch/mkckpt.py" "$T/old.safetensors" 7 0
python3 "$SRC/tests/patch/mkckpt.py" "$T/new.safetensors" 7 1
# The byte range of emb.weight's second 512-element chunk (it has changes: ~5% per step).
range=$(python3 - "$T/old.safetensors" "$T/new.safetensors" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    return b, json.loads(b[8:8 + n]), 8 + n
old, h, start = load(sys.argv[1]); new, _, _ = load(sys.argv[2])
lo, hi = h["emb.weight"]["data_offsets"]
at, end = start + lo + 1024, min(start + lo + 2048, start + hi)
assert old[at:end] != new[at:end], "the chunk has no change"
print(at, end - at)
PY
) || { echo "FAIL: no changed chunk"; exit 1; }
set -- $range

for threads in 1 2; do
  cp "$T/new.safetensors" "$T/moving.safetensors"
  n=$((n+1))
  if env LD_PRELOAD="$SHIM" PULSE_CHANGE_FROM="$T/old.safetensors" PULSE_CHANGE_TO="$T/moving.safetensors" \
       PULSE_CHANGE_AT=$1 PULSE_CHANGE_LEN=$2 \
       "$P" diff "$T/old.safetensors" "$T/moving.safetensors" -o "$T/p" --chunk 512 --threads $threads \
       >"$T/out" 2>"$T/err"; then
    echo "FAIL (succeeded, $threads threads): the diff did not see NEW change"; fails=$((fails+1))
  elif [ "$(wc -l <"$T/err")" -ne 1 ] || ! grep -q "^pulse .*tensor emb.weight changed while the patch was being written" "$T/err"; then
    echo "FAIL (not one line naming the tensor, $threads threads):"; cat "$T/err"; fails=$((fails+1))
  fi
  check "[ ! -e '$T/p' ] && [ -z \"\$(ls '$T' | grep 'p.tmp')\" ]"
  # the shim did change NEW (else the refusal above could not have come from it)
  check "cmp -s <(tail -c +$(($1 + 1)) '$T/moving.safetensors' | head -c $2) <(tail -c +$(($1 + 1)) '$T/old.safetensors' | head -c $2)"
done
# Without the shim the same pair diffs fine.
n=$((n+1))
"$P" diff "$T/old.safetensors" "$T/new.safetensors" -o "$T/p" --chunk 512 >"$T/out" 2>"$T/err" \
  || { echo "FAIL: plain diff"; cat "$T/err"; fails=$((fails+1)); }

echo "$n passed minus $fails failed"
[ "$fails" -eq 0 ]
