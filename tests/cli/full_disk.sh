#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A full disk, for real: every writing verb run against a small tmpfs that has run out of room
# must print one error line naming the cause, exit non-zero and leave every file as it was;
# what only rewrites existing bytes (apply --in-place, a follower's patch step) needs no room.
set -u
P=${PULSE_BIN:?}

# The tmpfs lives in a mount namespace of this script's own, so nothing outside sees it and
# it vanishes with the script. That needs root and unshare(1): otherwise skip, saying why.
if [ "${PULSE_FULL_DISK_INSIDE:-}" != 1 ]; then
  if ! unshare -m --propagation private true 2>/dev/null; then
    echo "SKIP: needs root and a mount namespace (unshare -m) for a small tmpfs"
    exit 77
  fi
  exec env PULSE_FULL_DISK_INSIDE=1 unshare -m --propagation private bash "$0" "$@"
fi

T=$(mktemp -d)
trap 'umount "$T/full" 2>/dev/null; rm -rf "$T"' EXIT
cd "$T" || exit 1
mkdir full
if ! mount -t tmpfs -o size=4m tmpfs full 2>/dev/null; then
  echo "SKIP: cannot mount a tmpfs in the mount namespace"
  exit 77
fi
fails=0; n=0
ok()  { n=$((n+1)); if ! "$@" >out 2>err; then echo "FAIL (exit $?): $*"; cat err; fails=$((fails+1)); fi; }
check() { n=$((n+1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails+1)); fi; }
# A refusal for lack of room: non-zero exit, exactly one line on stderr, from pulse, naming it.
full() {
  n=$((n+1))
  if "$@" >out 2>err; then echo "FAIL (succeeded on a full disk): $*"; fails=$((fails+1)); return; fi
  if [ "$(wc -l <err)" -ne 1 ] || ! grep -q "^pulse " err \
     || ! grep -Eq "No space left on device|disk is full" err; then
    echo "FAIL (not one line naming the full disk): $*"; cat err; fails=$((fails+1))
  fi
}
# Leaves `bytes` free on the tmpfs (the filler takes the rest).
fill() {
  rm -f full/filler
  local avail=$(( $(df -k --output=avail full | tail -1) * 1024 ))
  head -c $(( avail > $1 ? avail - $1 : 0 )) /dev/zero >full/filler 2>/dev/null
}
# Every file on the tmpfs but the filler, with its digest.
snap() { (cd full && find . -type f ! -name filler -print0 | sort -z | xargs -0 -r sha256sum); }
hash_of() { "$P" hash "$1"; }

"$P" synth --params 1M --steps 2 --out syn >/dev/null || { echo "FAIL: synth"; exit 1; }
s0=syn/step-000000.safetensors; s1=syn/step-000001.safetensors; s2=syn/step-000002.safetensors
"$P" keygen tr >/dev/null || { echo "FAIL: keygen"; exit 1; }
ok "$P" diff "$s0" "$s1" -o p01

# diff and apply -o: the output does not fit; nothing is left behind.
fill 20000
full "$P" diff "$s0" "$s1" -o full/p
check "[ -z \"\$(snap)\" ]"
fill 100000
full "$P" apply "$s0" p01 -o full/out.safetensors
check "[ -z \"\$(snap)\" ]"
check "grep -q 'full/out.safetensors' err"   # names the file it could not write, not the patch

# apply --in-place rewrites bytes that already have their room: it works on a full disk.
rm -f full/filler
cp "$s0" full/w.safetensors
fill 0
ok "$P" apply --in-place full/w.safetensors p01
check "cmp -s full/w.safetensors '$s1'"

# keygen: no half-written key.
rm -f full/w.safetensors
fill 10
full "$P" keygen full/k
check "[ -z \"\$(snap)\" ]"

# publish into a file:// store on the full disk: the keyframe, then a step; the store is
# untouched by each refusal, and the same command succeeds once there is room.
rm -f full/filler
mkdir full/store
pub() { "$P" publish --store "file://$T/full/store" --run r --key tr.key --state st "$1"; }
fill 20000
full pub "$s0"
check "[ -z \"\$(snap)\" ]"
rm -f full/filler
ok pub "$s0"
fill 3000
before=$(snap)
full pub "$s1"
check "[ \"\$(snap)\" = \"\$before\" ]"
rm -f full/filler
ok pub "$s1"

# pull: a keyframe that does not fit (state on the normal disk) leaves no weights file; a
# follower on the tmpfs (weights and state) at step 1, with no room left, refuses step 2 with
# its weights as they were, and takes it once there is room.
pull() { "$P" pull --store "file://$T/full/store" --run r --trust tr.pub --state "$1" --weights "$2"; }
fill 100000
before=$(snap)
full pull fst full/w.safetensors
check "[ \"\$(snap)\" = \"\$before\" ]"
rm -f full/filler
ok pull full/fst full/w.safetensors
check "[ \"\$(hash_of full/w.safetensors)\" = \"\$(hash_of '$s1')\" ]"
ok pub "$s2"
fill 0
full pull full/fst full/w.safetensors
check "[ \"\$(hash_of full/w.safetensors)\" = \"\$(hash_of '$s1')\" ]"
rm -f full/filler
ok pull full/fst full/w.safetensors
check "[ \"\$(hash_of full/w.safetensors)\" = \"\$(hash_of '$s2')\" ]"

# A LoCo trainer (alone: quorum 1) whose state is on the full disk: the round is refused with
# the state as it was, and the same round succeeds once there is room.
rm -f full/filler
gen=${PULSE_SRC:?}/tests/loco/locogen.py
python3 "$gen" init theta0.safetensors 17 && python3 "$gen" local theta0.safetensors 7 1e-5 4 l1.safetensors \
  || { echo "FAIL: locogen"; exit 1; }
ok "$P" loco init --state full/s --global theta0.safetensors
round() { "$P" loco round --store "file://$T/lstore" --run L --key tr.key --trainers tr.pub --quorum 1 \
            --deadline 10 --state full/s --local l1.safetensors -o full/new.safetensors; }
fill 0
before=$(snap)
full round
check "[ \"\$(snap)\" = \"\$before\" ]"
rm -f full/filler
ok round
check "[ -s full/new.safetensors ]"

echo "$n checks, $fails failed"
[ "$fails" -eq 0 ]
