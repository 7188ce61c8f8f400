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

"$P" synth --params 1M --steps 3 --out syn >/dev/null || { echo "FAIL: synth"; exit 1; }
s0=syn/step-000000.safetensors; s1=syn/step-000001.safetensors; s2=syn/step-000002.safetensors
s3=syn/step-000003.safetensors
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
# So does one whose undo would go to a temporary beside the target (PULSE_UNDO_MEMORY=0): there
# is no room for it, so it is kept in memory.
rm -f full/filler
cp "$s0" full/w.safetensors
fill 0
ok env PULSE_UNDO_MEMORY=0 "$P" apply --in-place full/w.safetensors p01
check "cmp -s full/w.safetensors '$s1' && [ -z \"\$(ls full | grep -F '.undo.')\" ]"

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

# A step fetched into the state directory's fetch.data with room for the index but not for the
# patch (~430 kB at lr 3e-4): the
# fetch is refused before any byte of it is fetched, naming the object; the weights as they
# were, no temporary left; taken once there is room.
rm -rf full/store full/fst full/w.safetensors full/filler
"$P" synth --params 1M --steps 1 --lr 3e-4 --out wide >/dev/null || { echo "FAIL: synth"; exit 1; }
pub3() { "$P" publish --store "file://$T/store3" --run r3 --key tr.key --state st3 "$1"; }
pull3() { "$P" pull --store "file://$T/store3" --run r3 --trust tr.pub --state full/fst3 --weights full/w3.safetensors; }
ok pub3 wide/step-000000.safetensors
ok pull3
ok pub3 wide/step-000001.safetensors
fill 200000
full pull3
check "grep -q '^pulse pull: .*object .*: no room for its [0-9]* bytes in full/fst3: No space left on device' err"
check "[ \"\$(hash_of full/w3.safetensors)\" = \"\$(hash_of wide/step-000000.safetensors)\" ]"
check "[ -z \"\$(ls -A full/fst3 | grep -v -x -e index.db -e index.db-wal -e index.db-shm -e lock -e unsynced)\" ]"
rm -f full/filler
ok pull3
check "[ \"\$(hash_of full/w3.safetensors)\" = \"\$(hash_of wide/step-000001.safetensors)\" ]"
rm -rf full/fst3 full/w3.safetensors

# The long-running follower (pulse node follow), weights and state on the tmpfs, its store on
# the normal disk: running at step 0 when the disk fills and step 1 appears, it logs the step it
# cannot take, keeps running with its weights as they were, takes the step once there is room,
# and stops on SIGTERM with exit 0. (One that cannot even open its state at start exits with
# the same one-line error: checked first.)
rm -rf full/store full/fst full/w.safetensors full/filler
pub2() { "$P" publish --store "file://$T/store2" --run r2 --key tr.key --state st2 "$1"; }
ok pub2 "$s0"
follow() { "$P" node follow --store "file://$T/store2" --run r2 --trust tr.pub --state full/fst2 \
             --weights full/w2.safetensors --poll-ms 100 "$@"; }
fill 0
n=$((n+1))   # a node logs its events on stderr too: its last line is the error
if follow --once >out 2>err; then echo "FAIL (succeeded on a full disk): follow --once"; fails=$((fails+1))
elif ! tail -n 1 err | grep -Eq "^pulse node follow: .*(No space left on device|disk is full)"; then
  echo "FAIL (last line does not name the full disk): follow --once"; cat err; fails=$((fails+1))
fi
rm -f full/filler
"$P" node follow --store "file://$T/store2" --run r2 --trust tr.pub --state full/fst2 \
  --weights full/w2.safetensors --poll-ms 100 2>node.log &
node=$!
for _ in $(seq 100); do [ -f full/w2.safetensors ] && [ "$(hash_of full/w2.safetensors 2>/dev/null)" = "$(hash_of "$s0")" ] && break; sleep 0.1; done
check "[ \"\$(hash_of full/w2.safetensors)\" = \"\$(hash_of '$s0')\" ]"
fill 0
ok pub2 "$s1"
for _ in $(seq 50); do grep -q "No space left on device\|disk is full" node.log && break; sleep 0.1; done
check "grep -q 'No space left on device\|disk is full' node.log"
check "kill -0 $node 2>/dev/null"
check "[ \"\$(hash_of full/w2.safetensors)\" = \"\$(hash_of '$s0')\" ]"
rm -f full/filler
want=$(hash_of "$s1")
for _ in $(seq 100); do [ "$(hash_of full/w2.safetensors)" = "$want" ] && break; sleep 0.2; done
check "[ \"\$(hash_of full/w2.safetensors)\" = \"\$want\" ]"
kill -TERM $node
wait $node
check "[ $? -eq 0 ]"
rm -rf full/fst2 full/w2.safetensors

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
