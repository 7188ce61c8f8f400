#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Smoke test of examples/rl: the FP8/FP16/BF16 casts, a tiny model warmed up for a few steps,
# then GRPO steps published through pulse every step (trainer on the CLI backend) while a
# follower (bindings backend when they load) pulls the steps into its BF16 model in place and
# checks its logits equal the trainer's bit for bit at each pull (it may catch up several steps
# in one, depending on timing); one measurement step with every payload.
set -euo pipefail
: "${PULSE_BIN:?}" "${PULSE_SRC:?}"
PY=/usr/bin/python3
RL="$PULSE_SRC/examples/rl"
work=$(mktemp -d)
follower_pid=
cleanup() { [ -n "$follower_pid" ] && kill "$follower_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
cd "$work"

$PY "$PULSE_SRC/tests/rl/test_views.py"

$PY "$RL/train.py" sft --tiny --steps 10 --eval-every 10 --out sft.pt
"$PULSE_BIN" keygen trainer >/dev/null
store="file://$work/store"

$PY "$RL/follow.py" --init sft.pt --store "$store" --trust trainer.pub --state follower \
    --logits-dir logits --timeout 90 >follower.log 2>&1 &
follower_pid=$!
# Partial-credit reward: the barely trained tiny model never gets an exact answer, and a step
# without reward signal changes nothing.
$PY "$RL/train.py" rl --init sft.pt --lr 3e-5 --steps 3 --prompts 4 --group 4 --reward digits \
    --store "$store" --key trainer.key --state publisher --logits-dir logits --backend cli >trainer.log
rc=0
wait "$follower_pid" || rc=$?
follower_pid=
cat trainer.log follower.log
[ "$rc" -eq 0 ] || { echo "FAIL: follower exited $rc"; exit 1; }
grep -q "published step 3: patch\|published step 3: sync-patch" trainer.log \
    || { echo "FAIL: step 3 was not published as a patch"; exit 1; }
grep -q "^follower step 3: .*EQUAL" follower.log || { echo "FAIL: follower did not check step 3"; exit 1; }
if grep -q "DIFFERENT" follower.log; then echo "FAIL: logits differ"; exit 1; fi
# The check is not vacuous: the updates changed the logits the follower compared.
grep -q "changed since step" follower.log \
    || { echo "FAIL: no update changed the logits, the equality proves nothing"; exit 1; }

$PY "$RL/measure.py" --init sft.pt --out measure --lrs 3e-5 --steps 1 --prompts 4 --group 4 \
    --reward digits
$PY - <<'PYEOF'
import json
rec = json.loads(open("measure/measure-lr3e-5.jsonl").readline())
p, a = rec["payload"], rec["kinds"]["all"]
assert a["n"] > 0 and p["dense"] == 2 * a["n"], (p, a)
assert 0 < a["bf16"] <= a["fp32"] and p["pulse_ulp_val"] > 0, (p, a)
for k in ("pulse_ulp", "pulse_abs", "zstd_patch_from", "xdelta3"):
    assert 0 < p[k], (k, p)
print("measure: one step,", {k: p[k] for k in sorted(p)})
PYEOF
echo "rl smoke: OK"
