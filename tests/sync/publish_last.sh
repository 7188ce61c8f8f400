#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The publisher's copy of the last published state (STATE/last-<state id>.safetensors): one
# copy, named by the state it holds, brought to each new step in place (the same file, renamed);
# a copy lost mid-update (left as last-updating.safetensors) makes the next publish a keyframe,
# cleans it up, and a follower still reaches every step bit for bit. The last step's directions
# that builds publishing patches by direction (format 6) kept are removed, quietly.
set -u
P=${PULSE_BIN:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
fails=0; n=0
ok()  { n=$((n+1)); if ! "$@" >out 2>err; then echo "FAIL (exit $?): $*"; cat err; fails=$((fails+1)); fi; }
check() { n=$((n+1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails+1)); fi; }
pub() { ok "$P" publish --store "file://$T/store" --run r --key tr.key --state st "$@"; }
pull() { ok "$P" pull --store "file://$T/store" --run r --trust tr.pub --state fst --weights w.safetensors; }
lasts() { ls st | grep '^last-' | tr '\n' ' '; }

"$P" synth --params 1M --steps 4 --out syn >/dev/null || { echo "FAIL: synth"; exit 1; }
"$P" keygen tr >/dev/null || { echo "FAIL: keygen"; exit 1; }
id() { "$P" hash "$1"; }

pub syn/step-000000.safetensors
pub syn/step-000001.safetensors
check "[ \"\$(lasts)\" = \"last-\$(id syn/step-000001.safetensors).safetensors \" ]"
inode=$(stat -c %i st/last-*.safetensors)
head -c 4096 /dev/urandom >st/last.dirs
head -c 4096 /dev/urandom >st/last.dirs.tmp.Qw3rT9
pub syn/step-000002.safetensors
check "[ ! -e st/last.dirs ] && [ ! -e st/last.dirs.tmp.Qw3rT9 ]"
check "! grep -q dirs err"
check "[ \"\$(lasts)\" = \"last-\$(id syn/step-000002.safetensors).safetensors \" ]"
check "[ \"\$(id st/last-*.safetensors)\" = \"\$(id syn/step-000002.safetensors)\" ]"
check "[ \"\$(stat -c %i st/last-*.safetensors)\" = '$inode' ]"   # updated in place, not copied
pull
check "[ \"\$(id w.safetensors)\" = \"\$(id syn/step-000002.safetensors)\" ]"

# A crash between the rename to last-updating and the rename to the new state's name.
mv st/last-*.safetensors st/last-updating.safetensors
pub syn/step-000003.safetensors
check "grep -q 'is missing: publishing step 3 as a keyframe only' err"
check "[ \"\$(lasts)\" = \"last-\$(id syn/step-000003.safetensors).safetensors \" ]"
pull
check "[ \"\$(id w.safetensors)\" = \"\$(id syn/step-000003.safetensors)\" ]"

echo "$n passed minus $fails failed"
[ "$fails" -eq 0 ]
