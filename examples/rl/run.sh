#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates every figure and table of docs/results.md (RL part): supervised warm-up, the
# per-learning-rate measurement (BF16/FP16/FP8 sparsity, bound, payloads), the trainer -> follower
# sync run with the bit-for-bit logits check, the plots into docs/img/, then the PULSELoCo vs
# DiLoCo vs DDP runs (examples/rl/loco_run.sh) at lr 3e-5 and 1e-5.
#
#   bash examples/rl/run.sh            # full run (about 45 min on the busy 2-core dev machine)
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

# The pulse binary and library: $PULSE_BIN/$PULSE_LIB, else the release build of this checkout
# made by scripts/setup.sh (which also installs Debian's torch, numpy and matplotlib when missing).
if [ -z "${PULSE_BIN:-}" ]; then
    PULSE_SETUP_PYTHON=1 bash "$SRC/scripts/setup.sh"
    export PULSE_BIN="$SRC/build/tools/pulse"
    export PULSE_LIB="$SRC/build/libpulseweights.so"
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
# The LoCo experiments (docs/results.md, "PULSELoCo vs DiLoCo vs DDP"): a smaller model of their
# own (0.8M parameters, loco_run.py --size small) with its own warm-up, run at lr 3e-5 and again at
# 1e-5 from the same theta_0. SKIP_LOCO=1 skips them (about 25 minutes here).
if [ "${SKIP_LOCO:-0}" != 1 ]; then
    export BUILD=${BUILD:-$(dirname "$(dirname "$PULSE_BIN")")}
    SECONDS=0
    if [ "$QUICK" = 1 ]; then
        echo "[$(stamp)] LoCo experiments (quick) -> $OUT/loco"
        bash "$RL/loco_run.sh" "$OUT/loco" --quick 2>&1 | tee "$OUT/loco.log"
    else
        echo "[$(stamp)] LoCo experiments, lr 3e-5 -> $OUT/loco"
        bash "$RL/loco_run.sh" "$OUT/loco" 2>&1 | tee "$OUT/loco.log"
        echo "[$(stamp)] LoCo experiments, lr 1e-5 -> $OUT/loco-lr1e-5"
        mkdir -p "$OUT/loco-lr1e-5"
        cp "$OUT/loco/sft.pt" "$OUT/loco-lr1e-5/sft.pt"
        IMG_PREFIX=loco-lr1e-5- bash "$RL/loco_run.sh" "$OUT/loco-lr1e-5" --lr 1e-5 2>&1 | tee "$OUT/loco-lr1e-5.log"
    fi
    echo "loco: ${SECONDS} s" >>"$OUT/timings.txt"
fi
cat "$OUT/timings.txt"
echo "[$(stamp)] done: $OUT"
