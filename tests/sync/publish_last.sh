#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The publisher's copy of the last published state (STATE/last-<state id>.safetensors), named by
# the state it holds:
# - a hard link to the published file itself, where one can be made (no byte written again);
# - else (the state directory on another file system: /dev/shm here) one file, brought to each
#   new step in place from the spans the diff found (the same inode, renamed);
# - a linked file written in place after it was published is noticed (hashed) and dropped: the
#   next publish is a keyframe;
# - a copy lost mid-update (left as last-updating.safetensors) makes the next publish a keyframe
#   and is cleaned up;
# and a follower reaches every step bit for bit. The last step's directions that builds
# publishing patches by direction (format 6) kept are removed, quietly.
set -u
P=${PULSE_BIN:?}
T=$(mktemp -d)
S=$(mktemp -d /dev/shm/pulse-last.XXXXXX)
trap 'rm -rf "$T" "$S"' EXIT
cd "$T" || exit 1
fails=0; n=0
ok()  { n=$((n+1)); if ! "$@" >out 2>err; then echo "FAIL (exit $?): $*"; cat err; fails=$((fails+1)); fi; }
check() { n=$((n+1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails+1)); fi; }
pub() { ok "$P" publish --store "file://$T/store" --run r --key tr.key --state st "$@"; }
pull() { ok "$P" pull --store "file://$T/store" --run r --trust tr.pub --state fst --weights w.safetensors; }
lasts() { ls "${1:-st}" | grep '^last-' | tr '\n' ' '; }

"$P" synth --params 1M --steps 5 --out syn >/dev/null || { echo "FAIL: synth"; exit 1; }
"$P" keygen tr >/dev/null || { echo "FAIL: keygen"; exit 1; }
id() { "$P" hash "$1"; }

# Linked: the copy is the published file's inode.
pub syn/step-000000.safetensors
pub syn/step-000001.safetensors
check "[ \"\$(lasts)\" = \"last-\$(id syn/step-000001.safetensors).safetensors \" ]"
check "[ \"\$(stat -c %i st/last-*.safetensors)\" = \"\$(stat -c %i syn/step-000001.safetensors)\" ]"
head -c 4096 /dev/urandom >st/last.dirs
head -c 4096 /dev/urandom >st/last.dirs.tmp.Qw3rT9
pub syn/step-000002.safetensors
check "[ ! -e st/last.dirs ] && [ ! -e st/last.dirs.tmp.Qw3rT9 ]"
check "! grep -q dirs err"
check "[ \"\$(lasts)\" = \"last-\$(id syn/step-000002.safetensors).safetensors \" ]"
check "[ \"\$(stat -c %i st/last-*.safetensors)\" = \"\$(stat -c %i syn/step-000002.safetensors)\" ]"
pull
check "[ \"\$(id w.safetensors)\" = \"\$(id syn/step-000002.safetensors)\" ]"

# The trainer's file written in place after it was published (not what trainers do; the copy
# would be wrong): hashed, dropped, the next publish a keyframe; the follower still bit for bit.
python3 - syn/step-000002.safetensors <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-100, 2)
    b = f.read(1)
    f.seek(-100, 2)
    f.write(bytes([b[0] ^ 0x40]))
PY
pub syn/step-000003.safetensors
check "grep -q 'was written since it was published: removed; the next publish is a keyframe' err"
check "grep -q 'is missing: publishing step 3 as a keyframe only' err"
check "[ \"\$(lasts)\" = \"last-\$(id syn/step-000003.safetensors).safetensors \" ]"
pull
check "[ \"\$(id w.safetensors)\" = \"\$(id syn/step-000003.safetensors)\" ]"

# A crash between the rename to last-updating and the rename to the new state's name.
mv st/last-*.safetensors st/last-updating.safetensors
pub syn/step-000004.safetensors
check "grep -q 'is missing: publishing step 4 as a keyframe only' err"
check "[ \"\$(lasts)\" = \"last-\$(id syn/step-000004.safetensors).safetensors \" ]"
check "[ ! -e st/last-updating.safetensors ]"
pull
check "[ \"\$(id w.safetensors)\" = \"\$(id syn/step-000004.safetensors)\" ]"

# No link across file systems: a copy of its own, brought up to each step in place.
pubs() { ok "$P" publish --store "file://$T/store2" --run r --key tr.key --state "$S/st" "$@"; }
pubs syn/step-000000.safetensors
pubs syn/step-000001.safetensors
check "[ \"\$(lasts $S/st)\" = \"last-\$(id syn/step-000001.safetensors).safetensors \" ]"
inode=$(stat -c %i "$S"/st/last-*.safetensors)
pubs syn/step-000003.safetensors
check "[ \"\$(id $S/st/last-*.safetensors)\" = \"\$(id syn/step-000003.safetensors)\" ]"
check "[ \"\$(stat -c %i $S/st/last-*.safetensors)\" = '$inode' ]"   # updated in place, not copied

echo "$n passed minus $fails failed"
[ "$fails" -eq 0 ]
