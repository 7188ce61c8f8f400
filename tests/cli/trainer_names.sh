#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `pulse node trainer` recognises the checkpoint names real trainers write, takes --pattern, and logs each ignored name once.
#
# 1. Hugging Face checkpoint-<N>/, verl/DeepSpeed global_step_<N>/ and global_step<N>/, step<N>.safetensors
#    and step_<N>/ are published in step order; tmp-checkpoint-<N>/, a directory with its weights
#    only in a subdirectory, and other names are not, and each is logged once, by name, with a reason.
#    Every JSON log line parses, and numbers in it are numbers (names stay strings).
# 2. tmp-checkpoint-<N> renamed to checkpoint-<N> is published at the next run.
# 3. --pattern 'iter_{N}_w.safetensors': only matching files; a pattern without {N} is a usage error.
set -euo pipefail
: "${PULSE_BIN:?PULSE_BIN must name the pulse binary (meson test sets it)}"
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-names.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok   $*"; }
P() { timeout 120 "$PULSE_BIN" "$@"; }
cd "$work"
P synth --params 200K --steps 9 --out ck --threads 2 >/dev/null
P keygen tr >/dev/null
store="file://$work/store"
ck() { printf 'ck/step-%06d.safetensors' "$1"; }
trainer() {  # trainer RUN STATE WATCH LOG [options]
  local run=$1 st=$2 w=$3 log=$4; shift 4
  P node trainer --store "$store" --run "$run" --key tr.key --state "$st" --watch "$w" \
    --poll-ms 50 --once --log json "$@" 2>"$log" || { cat "$log"; fail "trainer on $w failed"; }
}
published_steps() { python3 - "$1" <<'PY'
import json, sys
steps = []
for line in open(sys.argv[1]):
    ev = json.loads(line)   # every line is one JSON object
    if ev["event"] == "published":
        assert isinstance(ev["step"], int) and isinstance(ev["bytes"], int), line
        assert isinstance(ev["state"], str) and len(ev["state"]) == 64, line
        steps.append(str(ev["step"]))
print(" ".join(steps))
PY
}
ignored_once() {  # ignored_once LOG NAME REASON-PART: logged exactly once, with that reason
  local n
  n=$(grep -c "\"event\":\"ignored\",\"name\":\"$2\"," "$1" || true)
  [ "$n" -eq 1 ] || { cat "$1"; fail "$2 logged as ignored $n times, want once"; }
  grep "\"event\":\"ignored\",\"name\":\"$2\"," "$1" | grep -q "$3" || { cat "$1"; fail "$2: reason is not '$3'"; }
}

# --- 1. the names trainers write ------------------------------------------------------------------
mkdir -p w/checkpoint-1 w/tmp-checkpoint-9 w/global_step_3 w/global_step4 w/step_6 \
  w/global_step_7/actor/huggingface w/runs
cp "$(ck 1)" w/checkpoint-1/model.safetensors
echo '{}' > w/checkpoint-1/trainer_state.json
cp "$(ck 9)" w/tmp-checkpoint-9/model.safetensors
cp "$(ck 3)" w/global_step_3/model.safetensors
cp "$(ck 4)" w/global_step4/model.safetensors
cp "$(ck 5)" w/step5.safetensors
cp "$(ck 6)" w/step_6/model.safetensors
cp "$(ck 7)" w/global_step_7/actor/huggingface/model.safetensors
echo '{}' > w/trainer_state.json
cp "$(ck 8)" w/checkpoint-8.pt
echo x > w/2024
trainer r1 st1 w one.log
got=$(published_steps one.log) || { cat one.log; fail "the log does not parse as JSON with numbers"; }
[ "$got" = "1 3 4 5 6" ] || { cat one.log; fail "published '$got', want 1 3 4 5 6"; }
ignored_once one.log tmp-checkpoint-9 "temporary name"
ignored_once one.log global_step_7 "subdirectories are not searched"
ignored_once one.log trainer_state.json "no step number"
ignored_once one.log runs "no step number"
ignored_once one.log checkpoint-8.pt "not a .safetensors file"
ignored_once one.log 2024 "no step number"   # a name of digits stays a JSON string
ok "checkpoint-N, global_step_N, global_stepN, stepN.safetensors, step_N published; the rest logged once each"

# --- 2. the rename that completes a Hugging Face checkpoint --------------------------------------
mv w/tmp-checkpoint-9 w/checkpoint-9
trainer r1 st1 w two.log
[ "$(published_steps two.log)" = "9" ] || { cat two.log; fail "checkpoint-9 not published after its rename"; }
ok "tmp-checkpoint-9 renamed to checkpoint-9 is published"

# --- 3. --pattern ----------------------------------------------------------------------------------
mkdir p
cp "$(ck 0)" p/iter_0_w.safetensors
cp "$(ck 2)" p/iter_2_w.safetensors
cp "$(ck 1)" p/step-1.safetensors
trainer r2 st2 p three.log --pattern 'iter_{N}_w.safetensors'
[ "$(published_steps three.log)" = "0 2" ] || { cat three.log; fail "--pattern: want steps 0 2"; }
ignored_once three.log step-1.safetensors "does not match --pattern"
rc=0; P node trainer --store "$store" --run r3 --key tr.key --state st3 --watch p --pattern 'iter_w' \
  --once 2>bad.err || rc=$?
[ "$rc" -eq 2 ] && grep -q "exactly one {N}" bad.err || { cat bad.err; fail "a pattern without {N}: exit $rc"; }
ok "--pattern picks exactly its names; one without {N} is refused (exit 2)"
