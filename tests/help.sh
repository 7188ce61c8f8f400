#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every verb of `pulse` answers --help with usage on stdout and exit 0; unknown verbs exit 2.
set -u
pulse=${PULSE_BIN:?PULSE_BIN is not set}
fail=0
verbs=$("$pulse" --help | awk '/^verbs:/ {on=1; next} on && NF {print $1}')
[ -n "$verbs" ] || { echo "no verbs listed by pulse --help"; exit 1; }
for v in $verbs; do
  out=$("$pulse" "$v" --help 2>/dev/null); rc=$?
  if [ $rc -ne 0 ] || ! grep -qi "usage" <<<"$out"; then
    echo "FAIL: pulse $v --help (exit $rc, no usage on stdout)"; fail=1
  fi
done
"$pulse" no-such-verb >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL: unknown verb exit $rc, wanted 2"; fail=1; }
"$pulse" --version | grep -q '^pulse [0-9]' || { echo "FAIL: --version"; fail=1; }
[ $fail -eq 0 ] && echo "all $(wc -w <<<"$verbs") verbs answer --help"
exit $fail
