#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# End to end against the real RGW: the follower's on-update command runs once per applied step, after
# the weights hold that step, with PULSE_STEP/PULSE_STATE/PULSE_WEIGHTS/PULSE_RUN set; a failing
# command is reported (log and metrics) and does not block later steps; receipts reach `pulse status`.
# shellcheck source=tests/node/e2e_lib.sh disable=SC2154  # work, run, node_pid... come from it
. "$(dirname "$0")/e2e_lib.sh"

steps=6
fail_step=3
"$PULSE_BIN" keygen "$work/trainer" >/dev/null
"$PULSE_BIN" keygen "$work/f1" >/dev/null
make_trajectory "$steps"
start_proxy

# The hook: what it was told, and whether the weights file already held that step's bytes when it
# ran (what an inference server reloading it would see). It fails at one step.
cat >"$work/hook.sh" <<EOF
ckpt=\$(printf '$work/ckpt/step-%06d.safetensors' "\$PULSE_STEP")
if cmp -s "\$ckpt" "\$PULSE_WEIGHTS"; then held=yes; else held=no; fi
echo "\$PULSE_STEP \$PULSE_STATE \$PULSE_WEIGHTS \$PULSE_RUN \$held" >>"$work/hook.calls"
[ "\$PULSE_STEP" != $fail_step ] || { echo "hook: refusing step $fail_step on purpose" >&2; exit 7; }
EOF

start_trainer trainer
start_follower f1 --key "$work/f1.key" --on-update "sh $work/hook.sh" --metrics-file "$work/f1.prom"

# One step at a time, so each step is its own apply (and its own hook run).
for k in $(seq 0 "$steps"); do
  release "$k"
  wait_until 60 "f1 to hold step $k" same_as "$k" "$work/f1.safetensors"
done
hook_lines() { [ -f "$work/hook.calls" ] && [ "$(wc -l <"$work/hook.calls")" -ge $((steps + 1)) ]; }
wait_until 30 "the hook of step $steps" hook_lines
ok "f1 followed steps 0..$steps"

# Exactly one call per step, in order, each with the right environment, each after the apply.
want=""
for k in $(seq 0 "$steps"); do
  state=$("$PULSE_BIN" hash "$(ckpt "$k")") || fail "pulse hash failed"
  want+="$k $state $work/f1.safetensors $run yes"$'\n'
done
got=$(cat "$work/hook.calls")
[ "$got"$'\n' = "$want" ] || fail "hook calls differ; got:"$'\n'"$got"$'\n'"want:"$'\n'"$want"
ok "hook ran once per step with PULSE_STEP/STATE/WEIGHTS/RUN, after the weights held the step"

# The failure was reported, once, naming the step; the steps after it were applied all the same.
grep -q "\"event\":\"hook-failed\".*\"step\":\"\\?$fail_step\"\\?" "$work/f1.log" \
  || fail "the failing hook of step $fail_step was not logged"
[ "$(grep -c '"event":"hook-failed"' "$work/f1.log")" = 1 ] || fail "more than one hook failure logged"
grep -q '^pulse_hook_failures_total 1$' "$work/f1.prom" || fail "metrics do not count the hook failure"
ok "failing hook at step $fail_step reported; steps $((fail_step + 1))..$steps applied after it"

# receipt_at K: pulse status shows one follower, trusted, at step K with the trainer's state.
receipt_at() {
  "$PULSE_BIN" status --store "$store" --run "$run" --trust "$work/trainer.pub" --trust "$work/f1.pub" \
    --json >"$work/status.json" 2>/dev/null || return 1
  python3 - "$work/status.json" "$1" <<'PY'
import json, sys
st = json.load(open(sys.argv[1]))
f = [n for n in st["nodes"] if n["role"] == "follower"]
sys.exit(not (len(f) == 1 and f[0]["step"] == int(sys.argv[2]) and f[0]["signer"] == "trusted"
              and f[0]["match"] == "yes" and f[0]["lag_steps"] == 0))
PY
}
# Receipts: pulse status shows f1 at the newest step, with the trainer's state.
wait_until 30 "f1's receipt of step $steps" receipt_at "$steps"
stop_node f1
stop_node trainer
ok "pulse status: f1's signed receipt at step $steps, state matches the trainer's, lag 0"
check_applied_once f1 0 "$steps"
ok "index shows steps 0..$steps applied once each"
