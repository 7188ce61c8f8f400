#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two publishers with the same key and run (split brain): the one whose last record is not the store's head refuses.
#
# The record chain in the store is the single truth. Each publisher (its own state directory,
# the same key, one file:// store) checks before a publish that the node's head names its own
# last record; when the other one has gone on, it refuses with one line naming the record and
# writes nothing. So the final chain is one publisher's and a follower pulling it ends
# bit-identical to that chain's last checkpoint.
#  r1: A publishes 0, 1; B (a fresh state directory) tries step 2, then A goes on (2, 3) and
#      B tries step 4: B refuses both times.
#  r2: A and B both publish 0 and 1 (the same checkpoints: the same records); B goes on with
#      another checkpoint as step 2; A then tries step 3 (and step 2): refused.
set -euo pipefail

: "${PULSE_BIN:?PULSE_BIN must name the pulse binary (meson test sets it)}"
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-split.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok   $*"; }
P() { timeout 120 "$PULSE_BIN" "$@"; }
cd "$work"

P synth --params 1M --steps 4 --out ck --threads 2 >/dev/null
P keygen tr >/dev/null
node=$(sed -n 's/^pulse-ed25519-public-v1 \([0-9a-f]*\).*/\1/p' tr.pub)
[ ${#node} -eq 64 ] || fail "cannot read the node id from tr.pub"
store="file://$work/store"
ck() { echo "ck/step-00000$1.safetensors"; }
pub() {  # pub RUN STATE-DIR STEP CKPT-STEP
  P publish --store "$store" --run "$1" --key tr.key --state "$2" --step "$3" "$(ck "$4")"
}
snapshot() { (cd "store/$1" && find records heads -type f | sort | xargs md5sum); }
pull() {  # pull RUN: the follower's weights must equal checkpoint $2
  P pull --store "$store" --run "$1" --trust tr.pub --state "f-$1" --weights "f-$1.safetensors" >/dev/null \
    || fail "pull of $1 failed"
  cmp "f-$1.safetensors" "$(ck "$2")" || fail "the follower of $1 does not hold checkpoint $2"
}
refused() {  # refused RUN STATE-DIR STEP CKPT-STEP HEAD-REL WHAT: must fail, name HEAD-REL, change nothing
  local before
  before=$(snapshot "$1")
  if pub "$1" "$2" "$3" "$4" >out.log 2>err.log; then
    cat err.log; fail "$2 published step $3 after the other publisher's $5"
  fi
  cat err.log
  grep -q "$5 in the store is not this publisher's last record ($6): another publisher with the same key?" err.log \
    || fail "no line naming $5 and $6"
  [ "$(snapshot "$1")" = "$before" ] || fail "a refused publish changed the store"
}

# --- r1: B starts from nothing while A publishes ------------------------------------------------
pub r1 stA 0 0 >/dev/null
pub r1 stA 1 1 >/dev/null
pull r1 1
refused r1 stB 2 4 "records/sync-patch/000000000001/$node" "stB has published nothing"
ok "r1: a second publisher with a fresh state directory refuses (store unchanged)"
pub r1 stA 2 2 >/dev/null
pub r1 stA 3 3 >/dev/null
refused r1 stB 4 4 "records/sync-patch/000000000003/$node" "stB has published nothing"
pull r1 3
P manifest audit --store "$store" --run r1 --trust tr.pub >/dev/null 2>audit1.err || { cat audit1.err; fail "audit r1"; }
ok "r1: the chain is A's alone; the follower holds A's step 3 bit for bit; the audit is clean"

# --- r2: both have published the same steps, then B goes on ----------------------------------
pub r2 stA2 0 0 >/dev/null
pub r2 stB2 0 0 >/dev/null
pub r2 stA2 1 1 >/dev/null
pub r2 stB2 1 1 >/dev/null
ok "r2: the same checkpoints published by both give the same records (no refusal)"
pull r2 1
pub r2 stB2 2 4 >/dev/null
pull r2 4
stateA=$(P manifest show --store "$store" --run r2 --json "records/sync-patch/000000000001/$node" |
         sed -n 's/.*"result":"\([0-9a-f]\{16\}\).*/\1/p')
[ ${#stateA} -eq 16 ] || fail "cannot read the state of step 1"
refused r2 stA2 3 3 "records/sync-patch/000000000002/$node" "step 1, state $stateA..."
refused r2 stA2 2 2 "records/sync-patch/000000000002/$node" "step 1, state $stateA..."
ok "r2: the publisher left behind refuses, naming the other's record and its own last one"
pub r2 stB2 3 3 >/dev/null
pull r2 3
P manifest audit --store "$store" --run r2 --trust tr.pub >/dev/null 2>audit2.err || { cat audit2.err; fail "audit r2"; }
ok "r2: the chain is B's; the follower that held B's step 2 ends bit-identical to B's step 3"
