#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# pulse node follow --metrics answers scrapes while the follower is inside a pull (its hook held
# open by this script), with idle and half-sent clients connected; only GET /metrics; SIGTERM joins.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/follow_lib.sh"
command -v curl >/dev/null || { echo "SKIP: no curl"; exit 77; }

P synth --params 1M --steps 3 --out ckpt >/dev/null
publish 0 2

# The hook marks that step PULSE_STEP is inside the pull, then waits for this script's release
# file: the follower's loop is busy exactly as long as this script wants (a slow keyframe or
# patch, deterministically). Bounded, and it ends when the work directory is removed, so a
# failed test cannot hang the suite.
cat >hook.sh <<'H'
d=$(dirname "$0")
touch "$d/inside.$PULSE_STEP"
i=0
while [ -d "$d" ] && [ ! -e "$d/release.$PULSE_STEP" ] && [ "$i" -lt 1500 ]; do sleep 0.1; i=$((i + 1)); done
H
mkdir f
started_or_failed() { grep -q '"event":"started"\|"event":"start-failed"' f.log 2>/dev/null; }
# A free port below the ephemeral range (see follow.sh); one lost in a race is tried again.
for attempt in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 12000))
  ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && continue
  : >f.log
  start_follow f.log f --on-update "sh $work/hook.sh" --hook-timeout-ms 300000 --poll-ms 50 \
    --metrics "127.0.0.1:$port" --log json
  wait_until 60 started_or_failed || fail "follower neither started nor failed: $(cat f.log)"
  grep -q '"event":"start-failed".*Address already in use' f.log || break
  wait "$bg" 2>/dev/null
done
grep -q '"event":"started"' f.log || fail "follower did not start: $(cat f.log)"
url=http://127.0.0.1:$port

# scrape OUT: one GET /metrics; fails unless it answers 200 within 2 s with a well-formed
# exposition: 14 samples NAME VALUE, and the step phase histogram (8 phases x 13 bounds and
# +Inf, a sum and a count each), each metric with its TYPE.
scrape() {
  local code
  code=$(curl -s --max-time 2 -o "$1" -w '%{http_code}' "$url/metrics") || fail "scrape: no answer within 2 s (curl exit $?)"
  [ "$code" = 200 ] || fail "scrape: HTTP $code"
  [ "$(grep -v '^#' "$1" | grep -vc '^pulse_step_phase_seconds')" = 14 ] || fail "scrape: not 14 samples: $(cat "$1")"
  grep -v '^#' "$1" | grep -v '^pulse_step_phase_seconds' | grep -qvE '^pulse_[a-z_]+ -?[0-9]+(\.[0-9]+)?$' \
    && fail "scrape: a malformed sample: $(cat "$1")"
  [ "$(grep -cE '^pulse_step_phase_seconds_(bucket\{phase="[a-z_]+",le="[0-9.+Inf]+"\}|(sum|count)\{phase="[a-z_]+"\}) [0-9]+(\.[0-9]+)?$' "$1")" = 128 ] \
    || fail "scrape: not the 8 phases' 16 histogram samples each: $(grep phase "$1" | head -5)"
  [ "$(grep -c '^# TYPE pulse_' "$1")" = 15 ] || fail "scrape: not 15 TYPE lines"
}
m() { metric "$1" "$2"; }

# 1. Inside the first pull: the keyframe of step 0 is applied, its hook holds the loop.
wait_until 120 test -e inside.0 || fail "the hook of step 0 never ran: $(cat f.log)"
# An idle client (connected, sends nothing) stays connected through the scrapes.
exec 4<>"/dev/tcp/127.0.0.1/$port" || fail "connect idle client"
for i in 1 2 3 4 5; do
  scrape s0.$i
  [ "$(m s0.$i pulse_held_step)" = 0 ] || fail "inside the pull: held step $(m s0.$i pulse_held_step), want 0"
  [ "$(m s0.$i pulse_steps_applied_total)" = 1 ] || fail "inside the pull: steps applied $(m s0.$i pulse_steps_applied_total), want 1"
  sleep 0.2
done
fetched=$(m s0.5 pulse_bytes_fetched_total)
[ "$fetched" -gt 1000000 ] || fail "inside the pull: bytes fetched $fetched, the keyframe alone is larger"
age=$(m s0.5 pulse_newest_record_age_seconds)
awk -v a="$age" 'BEGIN { exit !(a >= 0) }' || fail "inside the pull: newest record age $age, want >= 0"
ok "5 scrapes answered within 2 s while step 0's hook held the pull (an idle client connected): held 0, 1 applied, $fetched bytes"

# 2. Only GET /metrics; a request head over the limit is refused; all while still inside the pull.
code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$url/") || fail "GET /: no answer"
[ "$code" = 404 ] || fail "GET /: HTTP $code, want 404"
code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$url/metricsx") || fail "GET /metricsx: no answer"
[ "$code" = 404 ] || fail "GET /metricsx: HTTP $code, want 404"
code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' -X POST -d x "$url/metrics") || fail "POST: no answer"
[ "$code" = 405 ] || fail "POST /metrics: HTTP $code, want 405"
code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' -H "X-Pad: $(head -c 4000 /dev/zero | tr '\0' a)" "$url/metrics") \
  || fail "a long request head: no answer"
[ "$code" = 431 ] || fail "a 4 KB request head: HTTP $code, want 431"
code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$url/metrics?x=1") || fail "GET /metrics?x=1: no answer"
[ "$code" = 200 ] || fail "GET /metrics?x=1: HTTP $code, want 200"
ok "/ and /metricsx: 404; POST: 405; a 4 KB head: 431; a query string: 200"

# 3. A request sent in two parts, a scrape answered in between, is answered once complete (one
# request, then the connection closes).
exec 5<>"/dev/tcp/127.0.0.1/$port" || fail "connect half-request client"
printf 'GET /metr' >&5
scrape s0.half
printf 'ics HTTP/1.0\r\n\r\n' >&5
http=$(timeout 5 cat <&5) || fail "the completed request got no answer"
exec 5<&-
grep -q '^HTTP/1.0 200' <<<"$http" || fail "the completed request: $(head -1 <<<"$http")"
grep -q '^pulse_held_step 0' <<<"$http" || fail "the completed request's body: $http"
exec 4<&-
ok "a request sent in two parts is answered once complete"
# More idle clients than the server keeps (16): the oldest are let go, a scrape still answers.
for fd in 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23; do
  eval "exec $fd<>/dev/tcp/127.0.0.1/$port" || fail "connect idle client $fd"
done
scrape s0.crowd
for fd in 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23; do eval "exec $fd<&-"; done
ok "18 idle clients connected at once do not keep a scrape out"

# 4. Inside the same pull, the next (patch) step: its hook holds the loop again.
touch release.0
wait_until 120 test -e inside.1 || fail "the hook of step 1 never ran: $(cat f.log)"
scrape s1
[ "$(m s1 pulse_held_step)" = 1 ] || fail "step 1's hook: held step $(m s1 pulse_held_step), want 1"
[ "$(m s1 pulse_steps_applied_total)" = 2 ] || fail "step 1's hook: steps applied $(m s1 pulse_steps_applied_total)"
f1=$(m s1 pulse_bytes_fetched_total)
[ "$f1" -ge "$fetched" ] || fail "bytes fetched went back: $fetched then $f1"
touch release.1 release.2
wait_until 120 test -e inside.2 || fail "the hook of step 2 never ran: $(cat f.log)"
held2() { scrape s2 && [ "$(m s2 pulse_held_step)" = 2 ] && [ "$(m s2 pulse_lag_steps)" = 0 ]; }
wait_until 60 held2 || fail "after the pull: $(cat s2)"
ok "step 1's hook: held 1, 2 applied, bytes $f1; after the pull held 2, lag 0"
# Each applied step is in the phase histogram once its hook is done (the hooks held the loop
# for a while: their phase's sum is above 0).
counted() { scrape s3 && grep -qx 'pulse_step_phase_seconds_count{phase="fetch"} 3' s3; }
wait_until 60 counted || fail "the phase histogram does not count the 3 steps: $(grep 'count{' s3)"
grep -qx 'pulse_step_phase_seconds_count{phase="hook"} 3' s3 || fail "hook phase count: $(grep 'count{' s3)"
hook_sum=$(sed -n 's/^pulse_step_phase_seconds_sum{phase="hook"} //p' s3)
awk -v s="$hook_sum" 'BEGIN { exit !(s > 0) }' || fail "hook phase sum $hook_sum, the hooks waited"
ok "the phase histogram counts the 3 steps, their hooks' time in it"

# 5. SIGTERM: the server thread is joined and the port closed; exit 0.
kill -TERM "$bg"
rc=0
wait "$bg" || rc=$?
bg=""
[ "$rc" = 0 ] || fail "SIGTERM: exit $rc: $(tail -3 f.log)"
grep -q '"event":"stopped"' f.log || fail "no stopped event"
if curl -s --max-time 2 -o /dev/null "$url/metrics"; then fail "the metrics port still answers after exit"; fi
cmp -s "$(ckpt 2)" f/w.safetensors || fail "weights differ from step 2"
ok "SIGTERM: exit 0, the metrics port closed, weights at step 2"
