#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# `pulse store` on a file:// directory someone else can write: a symlink as the key is refused by
# get, head, rm and put, ls does not follow one, and the files outside stay as they were.
set -u
P=${PULSE_BIN:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
fails=0; n=0
check() { n=$((n+1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails+1)); fi; }
# A refusal: exit 1, one line on stderr naming the key and the symlink.
refused() {
  local key=$1; shift
  n=$((n+1))
  "$@" >out 2>err
  local rc=$?
  if [ $rc -ne 1 ] || [ "$(wc -l <err)" -ne 1 ] || ! grep -q "$key" err \
     || ! grep -q "is a symbolic link, refused" err; then
    echo "FAIL (exit $rc, wanted 1 and one line refusing the symlink $key): $*"; cat err
    fails=$((fails+1))
  fi
}

mkdir -p store outside
printf 'SECRET' >outside/secret
printf 'mine' >mine
ln -s "$T/outside/secret" store/leak
ln -s "$T/outside" store/sub
S="file://$T/store"

refused leak "$P" store get "$S/leak" -o got
check "[ ! -e got ]"
refused leak "$P" store head "$S/leak"
refused leak "$P" store rm "$S/leak"
check "[ -L store/leak ]"
refused leak "$P" store put "$S/leak" mine
check "[ \"\$(cat outside/secret)\" = SECRET ]"
# For file:// the CLI's store is the key's directory (docs/store.md), so every key it names is one
# segment: a directory on the way is part of the path the user typed. Lists from the real root
# still neither name the symlinked directory nor descend into it.
"$P" store put "$S/real" mine 2>err || { echo "FAIL: put real"; cat err; fails=$((fails+1)); }
check "[ \"\$('$P' store ls '$S/')\" = real ]"
check "[ -z \"\$('$P' store ls '$S/su')\" ] && [ -z \"\$('$P' store ls '$S/le')\" ]"
# A plain key still round-trips.
check "'$P' store get '$S/real' -o back && [ \"\$(cat back)\" = mine ]"
check "'$P' store rm '$S/real' && [ ! -e store/real ]"
check "[ \"\$(cat outside/secret)\" = SECRET ] && [ \"\$(ls outside)\" = secret ]"

echo "store_symlinks: $n checks, $fails failed"
[ "$fails" -eq 0 ]
