#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A write-back error seen only by the patch writer's background flush (every fdatasync fails,
# the final fsync succeeds: an fd reports such an error to one sync only) must fail the diff
# and the squash with one line naming the sync, and leave no output and no temporary behind.
set -u
P=${PULSE_BIN:?}
SRC=${PULSE_SRC:?}
SHIM=${PULSE_FAIL_FDATASYNC:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0; n=0
ok()  { n=$((n+1)); if ! "$@" >"$T/out" 2>"$T/err"; then echo "FAIL (exit $?): $*"; cat "$T/err"; fails=$((fails+1)); fi; }
check() { n=$((n+1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails+1)); fi; }
# Refused for the lost write: non-zero exit, one line from pulse naming fsync and the I/O error.
lost() {
  n=$((n+1))
  rm -f "$T/syncs"
  if env LD_PRELOAD="$SHIM" PULSE_FDATASYNC_LOG="$T/syncs" PULSE_PATCH_FLUSH=1 "$@" >"$T/out" 2>"$T/err"; then
    echo "FAIL (succeeded with a failing flush): $*"; fails=$((fails+1)); return
  fi
  if [ "$(wc -l <"$T/err")" -ne 1 ] || ! grep -q "^pulse .*fsync .*Input/output error" "$T/err"; then
    echo "FAIL (not one line naming the sync): $*"; cat "$T/err"; fails=$((fails+1))
  fi
  n=$((n+1))
  [ -s "$T/syncs" ] || { echo "FAIL (the flusher never synced while the chunks were written): $*"; fails=$((fails+1)); }
}

"$P" synth --params 1M --steps 2 --out "$T/syn" >/dev/null || { echo "FAIL: synth"; exit 1; }
for s in 0 1 2; do ln -s "$T/syn/step-00000$s.safetensors" "$T/s$s.safetensors"; done
ok "$P" diff "$T/s0.safetensors" "$T/s1.safetensors" -o "$T/p01" --values abs
ok "$P" diff "$T/s1.safetensors" "$T/s2.safetensors" -o "$T/p12" --values abs

# The shim works: with it and the flusher off, the same diff succeeds (only fsync runs).
n=$((n+1))
if ! env LD_PRELOAD="$SHIM" PULSE_PATCH_FLUSH=0 "$P" diff "$T/s0.safetensors" "$T/s1.safetensors" \
     -o "$T/p-noflush" --chunk 65536 >"$T/out" 2>"$T/err"; then
  echo "FAIL: diff with the flusher off under the shim"; cat "$T/err"; fails=$((fails+1))
fi

for threads in 1 3; do
  lost "$P" diff "$T/s0.safetensors" "$T/s1.safetensors" -o "$T/p-lost" --chunk 65536 --threads $threads
  check "[ ! -e '$T/p-lost' ] && [ -z \"\$(ls '$T' | grep 'p-lost.tmp')\" ]"
done
# An existing output stays as it was.
cp "$T/p01" "$T/keep"
lost "$P" diff "$T/s0.safetensors" "$T/s1.safetensors" -o "$T/keep" --chunk 65536
check "cmp -s '$T/keep' '$T/p01' && [ -z \"\$(ls '$T' | grep 'keep.tmp')\" ]"
lost "$P" squash "$T/p01" "$T/p12" -o "$T/sq"
check "[ ! -e '$T/sq' ] && [ -z \"\$(ls '$T' | grep 'sq.tmp')\" ]"
# One ulp patch with its base (a follower's journal step): written chunk by chunk as it is
# coded, the same refusal and nothing left.
ok "$P" diff "$T/s0.safetensors" "$T/s1.safetensors" -o "$T/u01" --chunk 65536
for threads in 1 3; do
  lost "$P" squash "$T/u01" -o "$T/sq1" --base "$T/s0.safetensors" --threads $threads
  check "[ ! -e '$T/sq1' ] && [ -z \"\$(ls '$T' | grep 'sq1.tmp')\" ]"
done

echo "$n passed minus $fails failed"
[ "$fails" -eq 0 ]
