#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A trainer publishing a Llama-shaped model through a file:// store and an inference service of two
# tensor-parallel ranks (separate processes, fused qkv/gate_up shards only), each following the run
# with an engine-held follower, checking its shards bit for bit and generating every step.
# Usage: bash examples/serve/run.sh [--quick] [--steps N] [--store URL]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
steps=10 store=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) steps=3 ;;
    --steps) steps=$2; shift ;;
    --store) store=$2; shift ;;
    -h|--help) sed -n '3,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "serve: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
PY=${PYTHON:-/usr/bin/python3}
: "${PULSE_BIN:=$root/build/tools/pulse}"
if [ -z "${PULSE_LIB:-}" ]; then
  [ -x "$PULSE_BIN" ] || { echo "serve: build first (meson setup build && ninja -C build), or set PULSE_BIN/PULSE_LIB" >&2; exit 1; }
  export PULSE_LIB=$root/build/libpulseweights.so
fi
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} PYTHONDONTWRITEBYTECODE=1
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-serve.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; [ -n "${PULSE_SERVE_KEEP:-}" ] || rm -rf "$work"; }
trap cleanup EXIT
store=${store:-file://$work/store}
"$PULSE_BIN" keygen "$work/trainer" >/dev/null
port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

"$PY" "$here/trainer.py" --store "$store" --key "$work/trainer.key" --state "$work/trainer-state" --work "$work" \
  --steps "$steps" --ranks 2 >"$work/trainer.log" 2>&1 &
pids+=($!)
for r in 0 1; do
  "$PY" "$here/rank.py" --store "$store" --trust "$work/trainer.pub" --state "$work/rank$r" --work "$work" \
    --rank $r --tp 2 --port "$port" >"$work/rank$r.log" 2>&1 &
  pids+=($!)
done
# The first process to fail stops the others (the trainer would wait for its acks until its timeout).
rc=0
for _ in "${pids[@]}"; do
  if ! wait -n; then rc=1; break; fi
done
if [ "$rc" != 0 ]; then for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; fi
pids=()
cat "$work/trainer.log"
paste -d'\n' "$work/rank0.log" "$work/rank1.log" | sed '/^$/d'
[ "$rc" = 0 ] || { echo "serve: FAILED (logs above)" >&2; exit 1; }
"$PY" - "$work" "$steps" <<'PY'
import json, os, sys
work, steps = sys.argv[1], int(sys.argv[2])
r = [json.load(open(os.path.join(work, "rank-%d.json" % i))) for i in range(2)]
assert all(x["steps"] == steps + 1 for x in r), r
per = [sum(x["patch_bytes"]) / max(1, len(x["patch_bytes"])) for x in r]
whole = sum(r[0]["patch_size"]) / max(1, len(r[0]["patch_size"]))
print("serve: 2 ranks x %d steps, every rank's fused shards bit-identical to the trainer's BF16 state at "
      "every step; bytes per rank per patch step: %s of a %.0f-byte patch (%.2f of it: the patch's head, "
      "then only the chunks of each rank's slices); each rank holds %d bytes of parameters"
      % (steps + 1, " / ".join("%.0f" % p for p in per), whole, max(per) / max(1, whole), r[0]["param_bytes"]))
PY
