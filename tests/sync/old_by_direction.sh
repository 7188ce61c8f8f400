#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A run published by an earlier build with patches by direction: its sync-patch records name the
# whole patch, its head, and a third object, role "patch-by-direction" (a format-6 patch, no
# longer read); records as every publisher before patches came in parts wrote them. Such a record still
# verifies, a follower takes it by its plain patch (objects[0]), step by step and catching up,
# bit for bit, and `pulse manifest audit` accepts the run.
# usage: old_by_direction.sh FORGE   (FORGE: tests/sync/forge, the record-forging helper)
set -u
P=${PULSE_BIN:?}
SRC=${PULSE_SRC:?}
forge=${1:?usage: old_by_direction.sh FORGE}
forge=$(cd "$(dirname "$forge")" && pwd)/$(basename "$forge")   # the script works in its own directory
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
fails=0; n=0
ok()  { n=$((n+1)); if ! "$@" >out 2>err; then echo "FAIL (exit $?): $*"; cat err; fails=$((fails+1)); fi; }
check() { n=$((n+1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails+1)); fi; }
store="file://$T/store"
pub() { ok "$P" publish --store "$store" --run r --key tr.key --state st --context "$@"; }
pull() { ok "$P" pull --store "$store" --run r --trust tr.pub --state "$1" --weights "$1.safetensors"; }
id() { "$P" hash "$1"; }
ckpt() { echo "syn/step-00000$1.safetensors"; }

"$P" synth --params 1M --steps 3 --out syn >/dev/null || { echo "FAIL: synth"; exit 1; }
"$P" keygen tr >/dev/null || { echo "FAIL: keygen"; exit 1; }
pub "$(ckpt 0)"
pub "$(ckpt 1)"
pull a
check "[ \"\$(id a.safetensors)\" = \"\$(id $(ckpt 1))\" ]"
# steps 2 and 3 re-signed as the earlier publisher signed them: the patch whole, a format-6 patch named third
for s in 2 3; do
  pub "$(ckpt $s)"
  rel=$(cd store/r && ls records/sync-patch/00000000000$s/*)
  ok "$forge" sign tr.key "$store" r "$rel" $s --put-as "$rel" --one-patch --add-object "$SRC/tests/fuzz/corpus/patch/v6-prev.patch" patch-by-direction
  ok "$P" manifest show --store "$store" --run r --json "$rel"
  check "grep -q '\"role\":\"patch-by-direction\"' out"
done
# a follower one step behind takes step 2, then 3, each by its plain patch; a new one catches up
pull a
check "[ \"\$(id a.safetensors)\" = \"\$(id $(ckpt 3))\" ]"
pull b
check "[ \"\$(id b.safetensors)\" = \"\$(id $(ckpt 3))\" ]"
ok "$P" manifest audit --store "$store" --run r --trust tr.pub

echo "$n passed minus $fails failed"
[ "$fails" -eq 0 ]
