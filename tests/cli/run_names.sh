#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Run names and keys given on the command line: every verb that takes a run refuses a bad one
# (`..`, `.`, `x/y`, `a b`, ...) with one line `run "NAME": ...` and exit 2 before it opens or
# creates anything, and `pulse store` refuses a bad key the same way (`key "KEY": ...`).
set -u
P=${PULSE_BIN:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
fails=0; n=0
mkdir -p top/store/good/records top/keys
# What a run of ".." or "x/.." would reach: the directory above the store.
mkdir -p top/records top/objects && printf 'outside' >top/records/canary
"$P" keygen top/keys/node >/dev/null 2>&1 || { echo "FAIL: keygen"; exit 1; }
printf 'not a checkpoint' >top/ckpt
S="file://$T/top/store"
K=top/keys/node.key
PUB=top/keys/node.pub

snapshot() { find top -printf '%p %s %T@\n' | sort; }
# The command must exit 2 with `run "..."` (or `key "..."`, `prefix "..."`) on its first line
# of stderr, and leave every file under top/ exactly as it was (nothing created, nothing changed).
refused() {
  local what=$1; shift
  n=$((n+1))
  snapshot >before
  "$@" >out 2>err
  local rc=$?
  snapshot >after
  local bad=0
  if [ $rc -ne 2 ] || ! head -n1 err | grep -q "^pulse .*: $what \""; then
    echo "FAIL (exit $rc, wanted 2 and '$what \"...\"'): $*"; cat err; bad=1
  fi
  if ! cmp -s before after; then
    echo "FAIL (files changed): $*"; diff before after; bad=1
  fi
  fails=$((fails+bad))
}

bad_runs=(".." "." "x/y" "a b" "../top" "-x" "" "$(printf 'a\033]0;b')" \
  "$(printf '%0129d' 0)")
for r in "${bad_runs[@]}"; do
  refused run "$P" status --store "$S" --run "$r"
  refused run "$P" publish --store "$S" --run "$r" --key "$K" --state top/pubstate top/ckpt
  refused run "$P" pull --store "$S" --run "$r" --trust "$PUB" --state top/pullstate --weights top/w
  for sub in ls audit; do
    refused run "$P" manifest "$sub" --store "$S" --run "$r"
  done
  refused run "$P" manifest show --store "$S" --run "$r" 0
  refused run "$P" loco round --store "$S" --run "$r" --key "$K" --state top/locostate \
    --trainers "$PUB" --local top/ckpt
  refused run "$P" loco round --store "$S" --run good --publish-run "$r" --key "$K" \
    --state top/locostate --trainers "$PUB" --local top/ckpt
  refused run "$P" node trainer --store "$S" --run "$r" --key "$K" --state top/tstate --watch top
  refused run "$P" node follow --store "$S" --run "$r" --trust "$PUB" --state top/fstate \
    --weights top/w --once
done

# Keys in `pulse store` URLs: the same refusal, on s3:// (no request is made) and file://.
for k in ".." "." "a/../b" "a//b" "a/./b" "../top/records/canary"; do
  refused key "$P" store get "s3://bucket/$k" -o top/got
  refused key "$P" store head "s3://bucket/$k"
  refused key "$P" store rm "s3://bucket/$k"
  refused key "$P" store put "s3://bucket/$k" top/ckpt
  refused key "$P" store presign "s3://bucket/$k"
done
refused key "$P" store get "$S/.." -o top/got
refused key "$P" store rm "$S/."
refused prefix "$P" store ls "$S/.."
refused prefix "$P" store ls "s3://bucket/../"
refused prefix "$P" store ls "s3://bucket/x//"
# Good names still pass the check (and fail later, or not at all, for their own reasons).
n=$((n+1))
"$P" status --store "$S" --run good-run_1.0 >out 2>err
if grep -q 'run "' err; then echo "FAIL: a good run name refused"; cat err; fails=$((fails+1)); fi
n=$((n+1))
if ! "$P" store ls "$S/" >out 2>err; then echo "FAIL: store ls of the root"; cat err; fails=$((fails+1)); fi
[ "$(cat top/records/canary)" = outside ] || { echo "FAIL: canary changed"; fails=$((fails+1)); }

echo "run_names: $n checks, $fails failed"
[ "$fails" -eq 0 ]
