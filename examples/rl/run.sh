#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates every figure and table of docs/results.md (RL part): supervised warm-up, the
# per-learning-rate measurement (BF16/FP16/FP8 sparsity, bound, payloads), the trainer -> follower
# sync run with the bit-for-bit logits check, then the plots into docs/img/.
#
#   bash examples/rl/run.sh            # full run (16 min on the busy 2-core dev machine, plus LoCo)
#   bash examples/rl/run.sh --quick    # a few steps of each part (1 min), figures into $OUT/img
#
# OUT (default out/rl, or out/rl-quick) keeps the checkpoint, JSONL, logs and tables.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
PY=/usr/bin/python3
RL="$SRC/examples/rl"
if [ "$QUICK" = 1 ]; then
    OUT=${OUT:-$SRC/out/rl-quick}; IMG="$OUT/img"
    # 60 warm-up steps do not reach exact answers: partial credit keeps the RL steps moving.
    SFT_STEPS=60; MEASURE_STEPS=3; LRS=3e-6,3e-5; SYNC_STEPS=3; REWARD=digits
else
    OUT=${OUT:-$SRC/out/rl}; IMG="$SRC/docs/img"
    SFT_STEPS=600; MEASURE_STEPS=50; LRS=1e-6,3e-6,1e-5,3e-5; SYNC_STEPS=30; REWARD=exact
fi
mkdir -p "$OUT"

# The pulse binary and library: $PULSE_BIN, else a build of this checkout in build-rl.
if [ -z "${PULSE_BIN:-}" ]; then
    [ -d "$SRC/build-rl" ] || meson setup "$SRC/build-rl" "$SRC" >/dev/null
    ninja -C "$SRC/build-rl" -j2 >/dev/null
    export PULSE_BIN="$SRC/build-rl/tools/pulse"
    export PULSE_LIB="$SRC/build-rl/libpulseweights.so"
fi
export PYTHONDONTWRITEBYTECODE=1

stamp() { date -u +%H:%M:%S; }
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
    echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "torch: $($PY -c 'import torch; print(torch.__version__)'), numpy: $($PY -c 'import numpy; print(numpy.__version__)')"
    echo "pulse: $("$PULSE_BIN" --version 2>/dev/null || echo "$PULSE_BIN")"
    echo "commit: $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} >"$OUT/machine.txt"
cat "$OUT/machine.txt"

echo "[$(stamp)] 1/4 supervised warm-up -> $OUT/sft.pt"
SECONDS=0
$PY "$RL/train.py" sft --out "$OUT/sft.pt" --steps "$SFT_STEPS" --eval-every 25 --target 0.5 | tee "$OUT/sft.log"
echo "sft: ${SECONDS} s" >>"$OUT/timings.txt"

echo "[$(stamp)] 2/4 measurement: LRs $LRS, $MEASURE_STEPS steps each -> $OUT/measure"
SECONDS=0
$PY "$RL/measure.py" --init "$OUT/sft.pt" --out "$OUT/measure" --lrs "$LRS" --steps "$MEASURE_STEPS" \
    --reward "$REWARD" \
    | tee "$OUT/measure.log"
echo "measure: ${SECONDS} s" >>"$OUT/timings.txt"
if [ "$QUICK" = 0 ]; then
    echo "[$(stamp)] 2b: the paper's rate with another batch seed -> $OUT/measure-seed2"
    SECONDS=0
    $PY "$RL/measure.py" --init "$OUT/sft.pt" --out "$OUT/measure-seed2" --lrs 3e-6 --steps "$MEASURE_STEPS" \
        --seed 2 | tee "$OUT/measure-seed2.log"
    $PY "$RL/plots.py" --in "$OUT/measure-seed2" --img "$OUT/img-seed2" --tables "$OUT/tables-seed2.md" >/dev/null
    echo "measure-seed2: ${SECONDS} s" >>"$OUT/timings.txt"
fi

echo "[$(stamp)] 3/4 sync: trainer publishes each step, follower checks logits bit for bit"
SECONDS=0
S="$OUT/sync"
rm -rf "$S"; mkdir -p "$S"
"$PULSE_BIN" keygen "$S/trainer" >/dev/null
$PY "$RL/follow.py" --init "$OUT/sft.pt" --store "file://$S/store" --trust "$S/trainer.pub" \
    --state "$S/follower" --logits-dir "$S/logits" --timeout 1800 >"$OUT/follower.log" 2>&1 &
fpid=$!
trap 'kill "$fpid" 2>/dev/null || true' EXIT   # a failed trainer must not leave the follower waiting
$PY "$RL/train.py" rl --init "$OUT/sft.pt" --lr 3e-6 --steps "$SYNC_STEPS" --reward "$REWARD" --store "file://$S/store" \
    --key "$S/trainer.key" --state "$S/publisher" --logits-dir "$S/logits" | tee "$OUT/trainer.log"
wait "$fpid" || { cat "$OUT/follower.log"; echo "run.sh: the follower failed"; exit 1; }
trap - EXIT
tail -3 "$OUT/follower.log"
echo "store: $(du -sb "$S/store" | cut -f1) bytes for $((SYNC_STEPS + 1)) steps" | tee -a "$OUT/trainer.log"
echo "sync: ${SECONDS} s" >>"$OUT/timings.txt"

echo "[$(stamp)] 4/4 figures -> $IMG, tables -> $OUT/tables.md"
$PY "$RL/plots.py" --in "$OUT/measure" --img "$IMG" --tables "$OUT/tables.md" >/dev/null
# The LoCo experiments (examples/rl/loco*.py, their own helper) hook in here when present.
# They start from the same warm-up checkpoint (loco_run.sh reuses OUT/sft.pt when present).
if [ -f "$RL/loco_run.sh" ] && [ "${SKIP_LOCO:-0}" != 1 ]; then
    echo "[$(stamp)] LoCo experiments: $RL/loco_run.sh $OUT/loco"
    SECONDS=0
    mkdir -p "$OUT/loco"
    cp "$OUT/sft.pt" "$OUT/loco/sft.pt"
    loco_args=()
    [ "$QUICK" = 1 ] && loco_args=(--quick)
    bash "$RL/loco_run.sh" "$OUT/loco" "${loco_args[@]}" 2>&1 | tee "$OUT/loco.log"
    echo "loco: ${SECONDS} s" >>"$OUT/timings.txt"
fi
cat "$OUT/timings.txt"
echo "[$(stamp)] done: $OUT"
