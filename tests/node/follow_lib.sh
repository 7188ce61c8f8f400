# SPDX-License-Identifier: Apache-2.0
# Shared setup of the follower tests (sourced): a work directory, keys, a synthetic run, helpers.
set -euo pipefail
: "${PULSE_BIN:?PULSE_BIN must name the pulse binary (meson test sets it)}"
check=${1:?usage: $0 FOLLOW_CHECK}
check=$(cd "$(dirname "$check")" && pwd)/$(basename "$check")
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-follow.XXXXXX")
bg=""
cleanup() {
  if [ -n "$bg" ]; then kill -9 "$bg" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok   $*"; }
P() { timeout 120 "$PULSE_BIN" "$@"; }
cd "$work"
store=file://$work/store
mkdir -p store
P keygen --comment trainer trainer >/dev/null
P keygen --comment follower follower >/dev/null
ckpt() { printf 'ckpt/step-%06d.safetensors' "$1"; }
# publish FROM TO [KEYFRAME_EVERY]: steps FROM..TO of run r, a keyframe every N steps too.
publish() {
  local i kf
  for i in $(seq "$1" "$2"); do
    kf=()
    if [ -n "${3:-}" ] && [ "$i" -gt 0 ] && [ $((i % $3)) = 0 ]; then kf=(--keyframe); fi
    P publish --store "$store" --run r --key trainer.key --state tstate "${kf[@]}" "$(ckpt "$i")" >/dev/null \
      || fail "publish step $i"
  done
}
# follow DIR [options...]: pulse node follow of run r into DIR/w.safetensors.
follow() {
  local d=$1
  shift
  "$PULSE_BIN" node follow --store "$store" --run r --trust trainer.pub --state "$d/state" \
    --weights "$d/w.safetensors" "$@"
}
# start_follow LOG DIR [options...]: the same in the background; $bg is the pulse process itself
# (not a subshell), so signals reach it.
start_follow() {
  local log=$1 d=$2
  shift 2
  "$PULSE_BIN" node follow --store "$store" --run r --trust trainer.pub --state "$d/state" \
    --weights "$d/w.safetensors" "$@" 2>>"$log" &
  bg=$!
}
# metric FILE NAME: the value of one metric in an exposition file.
metric() { awk -v n="$2" '$1 == n { print $2 }' "$1"; }
# wait_until SECONDS CMD...: polls CMD every 0.1 s; fails after SECONDS (a hang, not a timing check).
wait_until() {
  local limit=$1 i=0
  shift
  until "$@" 2>/dev/null; do
    i=$((i + 1))
    [ "$i" -lt $((limit * 10)) ] || return 1
    sleep 0.1
  done
}
