#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The peak anonymous memory (RssAnon, kB) of a command, sampled from /proc every ~2 ms: what a
# process holds of its own, without the file pages it maps (which VmHWM and time -f %M count).
# A peak shorter than the period can be missed, so compare figures of the same command only.
#   tools/bench/peak_anon.sh CMD [ARGS...]   (CMD's output is discarded; prints "rc N peak K kB")
[ $# -ge 1 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
"$@" >/dev/null 2>&1 &
pid=$!
peak=0
while kill -0 "$pid" 2>/dev/null; do
  v=$(awk '/^RssAnon/ {print $2}' "/proc/$pid/status" 2>/dev/null)
  [ -n "$v" ] && [ "$v" -gt "$peak" ] && peak=$v
  sleep 0.002
done
wait "$pid"
rc=$?
echo "rc $rc peak $peak kB"
exit "$rc"
