#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates the trainer-to-trainer figures of docs/results.md (section 6): DDP vs DiLoCo vs PULSELoCo with
# 2 and 4 trainers (examples/rl/loco_run.py), then the PNGs in docs/img/ (loco_plots.py).
#   examples/rl/loco_run.sh [OUT] [loco_run.py options, e.g. --quick]     (OUT: BUILD/loco-out)
#   IMG_PREFIX=loco-lr1e-5- examples/rl/loco_run.sh OUT2 --lr 1e-5        (the 1e-5 figures)
# Needs a build with the pulse binary and libpulseweights.so: BUILD (default build) or PULSE_BIN/PULSE_LIB.
# OUT/sft.pt (theta_0) is reused when present; delete it to redo the supervised warm-up too.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$src/build}
out=${1:-$build/loco-out}
shift || true
export PULSE_BIN=${PULSE_BIN:-$build/tools/pulse}
export PULSE_LIB=${PULSE_LIB:-$build/libpulseweights.so}
export PYTHONPATH=$src/python:$src/examples/rl${PYTHONPATH:+:$PYTHONPATH}
py=/usr/bin/python3   # Debian's python3: python3-torch, python3-numpy, python3-matplotlib
mkdir -p "$out"
"$py" "$src/examples/rl/loco_run.py" --out "$out" "$@"
img=$src/docs/img
case " $* " in *" --quick "*) img=$out/img ;; esac   # quick runs never overwrite the documented figures
"$py" "$src/examples/rl/loco_plots.py" --out "$out" --img "$img" --prefix "${IMG_PREFIX:-loco-}"
