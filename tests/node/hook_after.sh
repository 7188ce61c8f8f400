#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# --hook-after pull runs the on-update command once per catch-up (for the newest step), also after a crash between a step and its hook; an HTTP error of a reload endpoint is a failed hook.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/follow_lib.sh"
unset MALLOC_PERTURB_

P synth --params 1M --steps 7 --out ckpt >/dev/null
publish 0 3
hook='echo "$PULSE_STEP $PULSE_STATE" >>'"$work"'/hooks'

# 1. A catch-up of four steps: one hook, for step 3, with its state.
follow c --once --hook-after pull --on-update "$hook" 2>c1.log || fail "catch-up: $(cat c1.log)"
[ "$(wc -l <hooks)" = 1 ] || fail "catch-up of 4 steps ran the hook $(wc -l <hooks) times: $(cat hooks)"
state3=$(P hash "$(ckpt 3)")
[ "$(cat hooks)" = "3 $state3" ] || fail "hook saw '$(cat hooks)', want step 3 $state3"
[ ! -e c/state/hook.pending ] || fail "hook.pending left after the hook ran"
ok "4 steps caught up, 1 hook: $(cat hooks | cut -c1-20)"

# 2. Nothing new: no hook. Two more steps: one hook, for step 5.
follow c --once --hook-after pull --on-update "$hook" 2>c2.log || fail "idle pull: $(cat c2.log)"
[ "$(wc -l <hooks)" = 1 ] || fail "a pull that applied nothing ran the hook"
publish 4 5
follow c --once --hook-after pull --on-update "$hook" 2>c3.log || fail "2 steps: $(cat c3.log)"
[ "$(wc -l <hooks)" = 2 ] && [ "$(tail -1 hooks | cut -d' ' -f1)" = 5 ] || fail "2 steps: hooks $(cat hooks)"
ok "idle pull: no hook; 2 more steps: 1 hook for step 5"

# 3. The default stays one hook per step.
: >hooks
follow d --once --on-update "$hook" 2>d.log || fail "per step: $(cat d.log)"
[ "$(cut -d' ' -f1 hooks | tr '\n' ' ')" = "0 1 2 3 4 5 " ] || fail "per-step hooks: $(cat hooks)"
ok "default: one hook per step"

# 4. A node stopped after a step but before its hook (the marker is written before the step's
# journal goes) runs the hook at its next start, though nothing new is applied.
: >hooks
: >c/state/hook.pending
follow c --once --hook-after pull --on-update "$hook" 2>c4.log || fail "pending: $(cat c4.log)"
[ "$(cat hooks)" = "5 $(P hash "$(ckpt 5)")" ] || fail "pending hook not run at start: '$(cat hooks)'"
[ ! -e c/state/hook.pending ] || fail "hook.pending left"
ok "a pending hook runs at the next start"

# 5. A reload endpoint that answers 500: with curl -f (docs/serving.md) the hook fails, is logged
# and counted, and the step stays applied.
cat >srv.py <<'PY'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.send_response(500); self.end_headers(); self.wfile.write(b"engine says no")
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_address[1]))
s.serve_forever()
PY
python3 srv.py port &
srv=$!
trap 'kill $srv 2>/dev/null; cleanup' EXIT
wait_until 30 test -s port || fail "no test server"
publish 6 6
follow c --once --hook-after pull --metrics-file c.prom \
  --on-update "curl -fsS -X POST http://127.0.0.1:$(cat port)/update_weights_from_disk" 2>c5.log ||
  fail "failing endpoint: $(cat c5.log)"
grep -q 'hook-failed.*step=6' c5.log || fail "a 500 was not a failed hook: $(cat c5.log)"
[ "$(metric c.prom pulse_hook_failures_total)" = 1 ] || fail "hook failure not counted: $(cat c.prom)"
[ "$(P hash c/w.safetensors)" = "$(P hash "$(ckpt 6)")" ] || fail "step 6 not kept"
ok "HTTP 500 from the endpoint: hook-failed, counted, step 6 kept"

# 6. A bad value is a usage error.
rc=0; follow c --once --hook-after sometimes 2>u.log || rc=$?
[ "$rc" = 2 ] && grep -q 'hook-after wants step or pull' u.log || fail "bad --hook-after: rc $rc $(cat u.log)"
ok "--hook-after sometimes refused"
