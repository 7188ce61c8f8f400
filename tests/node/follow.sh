#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# pulse node follow on a file:// store: --once catch-up, a running follower applying new steps
# with its hook (env, a failing step), receipts, metrics (file and HTTP), SIGTERM exit 0.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/follow_lib.sh"

P synth --params 1M --steps 6 --out ckpt >/dev/null
publish 0 2

# 1. --once from nothing: bit-identical, then a second --once applies nothing.
mkdir f1
follow f1 --once 2>f1.log || fail "follow --once: $(cat f1.log)"
cmp -s "$(ckpt 2)" f1/w.safetensors || fail "--once weights differ from the trainer's step 2"
grep -q 'catch-up path=keyframe reason=no-weights' f1.log || fail "no catch-up line: $(cat f1.log)"
follow f1 --once --metrics-file f1.prom 2>f1b.log || fail "second --once: $(cat f1b.log)"
[ "$(metric f1.prom pulse_steps_applied_total)" = 0 ] || fail "second --once applied steps: $(cat f1.prom)"
[ "$(metric f1.prom pulse_held_step)" = 2 ] || fail "second --once: held step is not 2"
ok "--once catches up bit-identically; a second --once applies nothing"
follow deep/er --once 2>deep.log || fail "a state directory two levels below what exists: $(cat deep.log)"
cmp -s "$(ckpt 2)" deep/er/w.safetensors || fail "weights under a created state directory differ"
touch plain
if follow plain/x --once 2>plain.log; then fail "a state directory under a file was accepted"; fi
grep -q 'cannot create directory plain/x' plain.log || fail "the refusal does not name the directory: $(cat plain.log)"
ok "--state is created with its missing parents (mkdir -p); under a plain file it is refused by name"

# 2. A running follower: hook, receipts, metrics, steps published while it runs.
cat >hook.sh <<'H'
[ "$PULSE_STEP" != 4 ] || exit 3
echo "$PULSE_STEP $PULSE_STATE $PULSE_RUN $PULSE_WEIGHTS" >>"$(dirname "$0")/hook.out"
H
# The metrics port: below the kernel's ephemeral range (32768 up), so no outgoing connection of a
# test running beside this one can hold it, and not listened on; a follower that still loses the
# race for it ("start-failed ... Address already in use") is started again on another.
mkdir f2
started_or_failed() { grep -q '"event":"started"\|"event":"start-failed"' f2.log 2>/dev/null; }
for attempt in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 12000))
  ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && continue
  : >f2.log
  start_follow f2.log f2 --key follower.key --on-update "sh $work/hook.sh" --poll-ms 50 --metrics-file f2.prom \
    --metrics "127.0.0.1:$port" --log json
  wait_until 30 started_or_failed || fail "follower neither started nor failed: $(cat f2.log)"
  grep -q '"event":"start-failed".*Address already in use' f2.log || break
  wait "$bg" 2>/dev/null
done
held_is() { [ "$(metric f2.prom pulse_held_step)" = "$1" ]; }
wait_until 60 held_is 2 || fail "follower did not reach step 2: $(cat f2.log)"
publish 3 3
wait_until 60 held_is 3 || fail "follower did not apply step 3: $(cat f2.log)"
publish 4 6
wait_until 60 held_is 6 || fail "follower did not apply steps 4..6: $(cat f2.log)"
# The HTTP endpoint answers with the same exposition.
exec 3<>"/dev/tcp/127.0.0.1/$port" || fail "metrics port $port refused"
printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
http=$(cat <&3)
exec 3<&-
grep -q '^HTTP/1.0 200' <<<"$http" || fail "metrics HTTP: $http"
grep -q '^pulse_held_step 6' <<<"$http" || fail "metrics HTTP body: $http"
# A head moved back to step 2 (a replayed or restored head) rolls nothing back.
tnode=$(sed -n 's/^pulse-ed25519-public-v1 \([0-9a-f]*\).*/\1/p' trainer.pub)
printf 'records/sync-patch/%012d/%s\n' 2 "$tnode" >stale-head.txt
P store put "$store/r/heads/sync/$tnode" stale-head.txt >/dev/null
stale_seen() { grep -q '"event":"head-stale".*"step":"000000000002","held":6' f2.log; }
wait_until 60 stale_seen || fail "stale head not noticed: $(tail -3 f2.log)"
held_is 6 || fail "a stale head moved the follower: $(cat f2.prom)"
cmp -s "$(ckpt 6)" f2/w.safetensors || fail "a stale head changed the weights"
kill -TERM "$bg"
rc=0
wait "$bg" || rc=$?
bg=""
[ "$rc" = 0 ] || fail "SIGTERM: exit $rc: $(tail -3 f2.log)"
grep -q '"event":"stopped"' f2.log || fail "no stopped event"
cmp -s "$(ckpt 6)" f2/w.safetensors || fail "running follower's weights differ from step 6"
ok "running follower applied steps published while it ran; a stale head rolled nothing back; SIGTERM exits 0"

# The hook: once per applied step except the failing one, with the step's state id.
declare -a hash
for i in 0 1 2 3 4 5 6; do hash[i]=$(P hash "$(ckpt "$i")"); done
expected=""
for i in 0 1 2 3 5 6; do expected+="$i ${hash[i]} r $work/f2/w.safetensors"$'\n'; done
[ "$(cat hook.out)"$'\n' = "$expected" ] || fail "hook lines: $(cat hook.out)"
grep -q '"event":"hook-failed","step":4,"reason":"exit 3"' f2.log || fail "hook failure not logged"
[ "$(metric f2.prom pulse_hook_failures_total)" = 1 ] || fail "hook failures metric: $(cat f2.prom)"
ok "hook ran once per step with PULSE_STEP/STATE/RUN/WEIGHTS; the failing step 4 was reported and 5, 6 still applied"

# Metrics and the index.
[ "$(metric f2.prom pulse_steps_applied_total)" = 7 ] || fail "steps applied metric: $(cat f2.prom)"
[ "$(metric f2.prom pulse_store_retries_total)" = 0 ] || fail "store retries metric (file:// never retries): $(cat f2.prom)"
[ "$(metric f2.prom pulse_lag_steps)" = 0 ] || fail "lag metric: $(cat f2.prom)"
[ "$(metric f2.prom pulse_verify_failures_total)" = 0 ] || fail "verify failures: $(cat f2.prom)"
fetched=$(metric f2.prom pulse_bytes_fetched_total)
[ "$fetched" -gt 1000000 ] || fail "bytes fetched $fetched: the keyframe alone is larger"
for line in '# TYPE pulse_lag_seconds gauge' '# TYPE pulse_bytes_fetched_total counter'; do
  grep -qx "$line" f2.prom || fail "metrics file lacks '$line'"
done
took=$(metric f2.prom pulse_last_step_seconds)
awk -v t="$took" 'BEGIN { exit !(t > 0 && t < 60) }' || fail "last step seconds '$took': want a time > 0"
# each applied event timed whole and by phase (docs/node.md, "Where a step's time goes")
phases='"seen_ms":[0-9]+\.[0-9],"fetch_ms":[0-9]+\.[0-9],"verify_ms":[0-9]+\.[0-9],"journal_ms":[0-9]+\.[0-9],"apply_ms":[0-9]+\.[0-9],"check_ms":[0-9]+\.[0-9],"hook_ms":[0-9]+\.[0-9],"index_ms":[0-9]+\.[0-9]'
timed=$(grep -cE '"event":"applied","step":[0-9]+,"kind":"[a-z-]+","bytes":[0-9]+,"ms":[0-9]+\.[0-9],'"$phases"',"state":"[0-9a-f]{64}"' f2.log)
[ "$timed" = 7 ] || fail "applied events with their ms: $timed of 7: $(grep applied f2.log | head -3)"
hooked=$(grep '"event":"applied"' f2.log | grep -cvE '"hook_ms":0\.0,')
[ "$hooked" -ge 5 ] || fail "applied events with their hook's time: $hooked: $(grep applied f2.log | head -3)"
[ "$("$check" applied f2/state/index.db r | cut -d' ' -f1 | tr '\n' ' ')" = "0 1 2 3 4 5 6 " ] \
  || fail "index applied rows: $("$check" applied f2/state/index.db r)"
ok "metrics: 7 steps, lag 0, 1 hook failure, $fetched bytes, last step ${took} s; each applied event timed; index has each step applied once"

# Receipts: one per step, signed by the follower, naming the state held.
node=$(sed -n 's/^pulse-ed25519-public-v1 \([0-9a-f]*\).*/\1/p' follower.pub)
for i in 0 1 2 3 4 5 6; do
  f=store/r/receipts/$node/$(printf '%012d' "$i")
  [ -f "$f" ] || fail "no receipt for step $i"
  [ "$("$check" receipt "$f" follower.pub)" = "receipt $i ${hash[i]}" ] || fail "receipt $i does not verify"
done
ok "receipts for steps 0..6 verify against the follower's key"

# 3. Usage errors.
rc=0
"$PULSE_BIN" node follow --store "$store" --run r 2>usage.err || rc=$?
[ "$rc" = 2 ] && grep -q 'needs --store, --run, --trust, --state and --weights' usage.err || fail "usage error: $rc"
ok "missing options: one-line usage error, exit 2"
