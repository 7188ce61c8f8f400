#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packs what tests/gpu/run.sh needs into one folder that runs on a GPU machine which has the
# CUDA driver but not pulse's build dependencies (libsodium, libzstd, SQLite, libcurl).
#
#   tests/gpu/bundle.sh [DIR]        # default build-gpu-bundle in the source tree
#
# Builds build-gpu with CUDA (nvcc is needed here, a GPU is not), then copies gpu_check, gpu_changes, the
# shared library and every shared library they load but glibc's own into DIR (DIR/libs).
# There: PULSE_GPU_BUILD=DIR tests/gpu/run.sh, which takes from DIR/libs only the libraries
# that machine lacks. Exit 0, or 1 with the step that failed.
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$src/build-gpu
out=${1:-$src/build-gpu-bundle}

if [[ ! -f $build/build.ninja ]]; then
    PATH=$PATH:/usr/local/cuda/bin meson setup "$build" "$src" -Dcuda=enabled -Dbuildtype=release >/dev/null \
        || { echo "bundle.sh: meson setup of $build with -Dcuda=enabled failed (is nvcc installed?)" >&2; exit 1; }
fi
ninja -C "$build" >/dev/null
lib=$(readlink -f "$build/libpulseweights.so")

rm -rf "$out"
mkdir -p "$out/tests/gpu" "$out/libs"
cp "$build/tests/gpu/gpu_check" "$build/tests/gpu/gpu_changes" "$out/tests/gpu/"
cp "$lib" "$out/libpulseweights.so"
# ldd's resolved paths; glibc's libraries come with every system and must match its loader
ldd "$build/tests/gpu/gpu_check" "$build/tests/gpu/gpu_changes" "$lib" | awk '/=> \//{print $3}' | sort -u | while read -r so; do
    case $(basename "$so") in
    libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|libresolv.so.*|ld-linux*) continue ;;
    esac
    cp -L "$so" "$out/libs/"
done
echo "bundle.sh: $out ($(du -sh "$out" | cut -f1), $(ls "$out/libs" | wc -l) libraries)"
