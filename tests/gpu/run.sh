#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds pulse with CUDA and runs every CUDA kernel against the scalar reference, the device
# apply of real patches, the apply-vs-copy benchmark (100M BF16 elements, 1% and 5% changed), then
# the device path of a part published from its changes against its CPU twin (gpu_changes).
#
#   tests/gpu/run.sh [--no-bench]
#
# Env: PULSE_GPU_BUILD (build directory, default build-gpu in the source tree; an existing
# build with tests/gpu/gpu_check is reused, so a machine with only the CUDA driver can run a
# build made elsewhere: tests/gpu/bundle.sh packs one with its libraries), PULSE_PYTHON (the
# Python that has torch, default /usr/bin/python3), TMPDIR (the benchmark writes ~1 GB of checkpoints and patches there).
# Exit: 0 all PASS, 1 any mismatch or error, 77 no CUDA device (nothing run).
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${PULSE_GPU_BUILD:-$src/build-gpu}
bench=--bench
py=${PULSE_PYTHON:-/usr/bin/python3}
[[ ${1:-} == --no-bench ]] && bench=

if [[ ! -x $build/tests/gpu/gpu_check || ! -x $build/tests/gpu/gpu_changes ]]; then
    if ! command -v meson >/dev/null || ! command -v ninja >/dev/null; then
        echo "run.sh: no build at $build and no meson/ninja to make one" >&2
        exit 1
    fi
    if [[ ! -f $build/build.ninja ]]; then
        PATH=$PATH:/usr/local/cuda/bin meson setup "$build" "$src" -Dcuda=enabled -Dbuildtype=release >/dev/null
    fi
    ninja -C "$build" tests/gpu/gpu_check tests/gpu/gpu_changes >/dev/null
fi

# A bundle (tests/gpu/bundle.sh) brings the libraries it was built with: only those this machine
# lacks are taken from it, so the system's own stay first.
if [[ -d $build/libs ]]; then
    own=$(mktemp -d)
    trap 'rm -rf "$own"' EXIT
    have=$(ldconfig -p 2>/dev/null | awk 'NR > 1 {print $1}' || true)
    for so in "$build"/libs/*; do
        grep -qxF "$(basename "$so")" <<<"$have" || ln -s "$(readlink -f "$so")" "$own/"
    done
    [[ -z $(ls "$own") ]] || echo "run.sh: from the bundle: $(ls "$own" | tr '\n' ' ')"
    export LD_LIBRARY_PATH=$own${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

# The whole run is sized for under 5 minutes on one H100/H200; a hang is a failure.
rc=0
timeout 600 "$build/tests/gpu/gpu_check" $bench || rc=$?
# gpu_check's failures are counted already; this one runs either way so one run says both
crc=0
timeout 300 "$build/tests/gpu/gpu_changes" || crc=$?
[[ $rc != 0 ]] || rc=$crc
# Python tensors on the GPU (pulseweights.device: patches applied with torch ops on the device; a
# run published from changes found there, pw.Changes), where torch sees one.
if [[ $rc == 0 ]] && "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    [[ -f $build/libpulseweights.so ]] || ninja -C "$build" >/dev/null
    PYTHONPATH=$src/python PULSE_LIB=$build/libpulseweights.so timeout 300 "$py" \
        "$src/tests/python/test_device.py" cuda || rc=$?
elif [[ $rc == 0 ]]; then
    echo "run.sh: $py has no torch that sees a CUDA device: test_device.py not run" >&2
fi
case $rc in
0) echo "run.sh: PASS" ;;
77) echo "run.sh: no CUDA device: nothing was tested" >&2 ;;
124) echo "run.sh: FAIL (timed out)" >&2; rc=1 ;;
*) echo "run.sh: FAIL (exit $rc)" >&2; rc=1 ;;
esac
exit $rc
