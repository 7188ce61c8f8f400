#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `pulse publish` / `pulse pull`: --json gives one object with the full state ids; progress on a terminal only.
#
# 1. publish --json and pull --json (stdout not a terminal): one JSON object each, numbers as
#    numbers, state = `pulse hash` of the checkpoint in 64 hex digits; nothing on stderr.
# 2. Under a pty (script -qc, util-linux): a keyframe publish and a pull draw a progress line
#    (bytes, MiB/s) on stderr; PULSE_PROGRESS_AFTER_MS=0 so that a small checkpoint shows it at once.
#    The same commands without a terminal print nothing but their result.
set -euo pipefail
: "${PULSE_BIN:?PULSE_BIN must name the pulse binary (meson test sets it)}"
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-out.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok   $*"; }
P() { timeout 120 "$PULSE_BIN" "$@"; }
cd "$work"
export PULSE_PROGRESS_AFTER_MS=0
P synth --params 2M --steps 3 --out ck --threads 2 >/dev/null
P keygen tr >/dev/null
store="file://$work/store"
h() { P hash "$(printf 'ck/step-%06d.safetensors' "$1")"; }
pub() { P publish --store "$store" --run r --key tr.key --state st "$@"; }
pull() { P pull --store "$store" --run r --trust tr.pub --state "$1" --weights "$2" "${@:3}"; }
check_json() {  # check_json FILE PYTHON-ASSERTIONS (j: the object)
  python3 - "$1" "$2" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
assert len(lines) == 1, lines
j = json.loads(lines[0])
exec(sys.argv[2])
PY
}

# --- 1. --json -------------------------------------------------------------------------------------
pub ck/step-000000.safetensors --json >p0.json 2>p0.err || { cat p0.err; fail "publish --json step 0"; }
check_json p0.json "assert j['step'] == 0 and j['kind'] == 'keyframe' and j['base'] is None and j['already'] is False
assert j['state'] == '$(h 0)', j['state']
assert isinstance(j['bytes'], int) and j['bytes'] > 0 and isinstance(j['dense_bytes'], int)" \
  || { cat p0.json; fail "publish --json step 0: wrong object"; }
pub ck/step-000001.safetensors --json >p1.json 2>p1.err || { cat p1.err; fail "publish --json step 1"; }
check_json p1.json "assert j['step'] == 1 and j['kind'] == 'sync-patch'
assert j['base'] == '$(h 0)' and j['state'] == '$(h 1)'" || { cat p1.json; fail "publish --json step 1: wrong object"; }
pub ck/step-000001.safetensors --json >p1b.json 2>>p1.err || fail "publish --json again"
check_json p1b.json "assert j['already'] is True and j['state'] == '$(h 1)'" || { cat p1b.json; fail "already: wrong object"; }
pull f1 w1.safetensors --json >l1.json 2>l1.err || { cat l1.err; fail "pull --json"; }
check_json l1.json "assert j['step'] == 1 and j['state'] == '$(h 1)' and j['applied'] == 2
assert [s['step'] for s in j['steps']] == [0, 1] and j['steps'][0]['state'] == '$(h 0)'
assert j['bytes'] == sum(s['bytes'] for s in j['steps'])" || { cat l1.json; fail "pull --json: wrong object"; }
[ ! -s p0.err ] && [ ! -s p1.err ] && [ ! -s l1.err ] || { cat p0.err p1.err l1.err; fail "stderr not empty without a terminal"; }
ok "publish --json and pull --json: one object each, full state ids, numbers"

# --- 2. progress on a terminal only ---------------------------------------------------------------
script -qec "$PULSE_BIN publish --store $store --run r --key tr.key --state st --keyframe ck/step-000002.safetensors" \
  /dev/null </dev/null >tty-pub.txt || { cat tty-pub.txt; fail "publish under a pty failed"; }
grep -aq 'keyframe [0-9.]* / [0-9.]* MiB  [0-9.]* MiB/s' tty-pub.txt || { cat -A tty-pub.txt; fail "no progress line for a keyframe publish on a terminal"; }
script -qec "$PULSE_BIN pull --store $store --run r --trust tr.pub --state f2 --weights w2.safetensors" \
  /dev/null </dev/null >tty-pull.txt || { cat tty-pull.txt; fail "pull under a pty failed"; }
grep -aq 'fetched [0-9.]* / [0-9.]* MiB  [0-9.]* MiB/s' tty-pull.txt || { cat -A tty-pull.txt; fail "no progress line for a pull on a terminal"; }
cmp w2.safetensors ck/step-000002.safetensors || fail "pull under a pty: wrong weights"
pull f3 w3.safetensors >np.out 2>np.err || { cat np.err; fail "pull without a terminal"; }
[ ! -s np.err ] && ! grep -q 'MiB/s' np.out || { cat np.out np.err; fail "progress printed without a terminal"; }
[ "$(wc -l <np.out)" -eq 2 ] || { cat np.out; fail "pull without a terminal: want a keyframe line and the summary"; }
ok "progress lines on a terminal (publish keyframe, pull), none without"
