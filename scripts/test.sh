#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's second command (and CI's): set up, build, start a real Ceph RGW on 127.0.0.1,
# run every suite on the release build, rerun the offline suites with SIMD masked off and with
# AVX-512 masked off (the AVX2 table), under ASan+UBSan and under ThreadSanitizer, stop the
# server, and end with one line
# "N passed, N failed[, N skipped]".
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

PULSE_SETUP_TESTS=1 bash scripts/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }

logs=()
infra_failed=0

# 1. The real S3 server. Stopped on every exit path.
rgw_dir=$(mktemp -d /tmp/pulse-rgw.XXXXXX)
stop_rgw() { bash tests/s3/rgw.sh stop "$rgw_dir" >/dev/null 2>&1 || true; rm -rf "$rgw_dir"; }
trap stop_rgw EXIT
if bash tests/s3/rgw.sh start "$rgw_dir"; then
  export PULSE_RGW_ENV="$rgw_dir/env"
else
  echo "test: could not start the Ceph RGW; the e2e suite will fail" >&2
  infra_failed=1
fi

# 2. Everything on the release build.
meson test -C build --print-errorlogs --num-processes 2 --no-suite slow
logs+=("build/meson-logs/testlog.json")

# 3. The offline suites again with every SIMD kernel masked off (scalar reference only).
PULSE_CPU_MASK=ffffffff meson test -C build --print-errorlogs --num-processes 2 \
  --suite unit --suite kernels --suite cli --logbase nosimd
logs+=("build/meson-logs/nosimd.json")

# 3b. Again with only AVX-512 and AVX512-BF16 masked off (PULSE_CPU_AVX512 | PULSE_CPU_AVX512BF16):
# on an AVX-512 machine the dispatch then picks the AVX2 table, which otherwise runs only in
# checkkernels, never through the codec, the node or the CLI. The CLI tests that run the codec
# and the gate end to end only (patch-*, sync-*, node-follow*, loco-*): the whole CLI suite
# would add over 4 minutes (docs/testing.md).
mapfile -t avx2_tests < <(meson test -C build --list --no-rebuild --suite unit --suite kernels \
  --suite cli 2>/dev/null | sed -En 's#^[^:]+:(unit|kernels) / ##p
    s#^[^:]+:cli / ((patch-|sync-|node-follow|loco-).*)$#\1#p')
PULSE_CPU_MASK=6 meson test -C build --print-errorlogs --num-processes 2 \
  --suite unit --suite kernels --suite cli --logbase avx2 "${avx2_tests[@]}"
logs+=("build/meson-logs/avx2.json")

# 4. ASan + UBSan build of the offline suites (the CLI suite runs the pulse binary under them;
# the tests that load the library into python3 or an uninstrumented program are not registered).
if [ ! -f build-asan/build.ninja ]; then
  meson setup build-asan --buildtype=debugoptimized -Db_sanitize=address,undefined \
    -Db_lundef=false -Dcuda=disabled >/dev/null
fi
if ninja -C build-asan >/dev/null; then
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
    meson test -C build-asan --print-errorlogs --num-processes 2 \
    --suite unit --suite kernels --suite fuzz-replay --suite cli --timeout-multiplier 3
  logs+=("build-asan/meson-logs/testlog.json")
else
  echo "test: the ASan+UBSan build failed" >&2
  infra_failed=1
fi

# 5. ThreadSanitizer build: every threaded path (parallel loops, the diff's in-order writes,
# the node daemons, LoCo rounds, the S3 client's transfers) run by the unit, kernel, CLI and
# e2e suites (the RGW is still up). A race fails the test (TSan exits 66). Slower: timeouts x4.
if [ ! -f build-tsan/build.ninja ]; then
  meson setup build-tsan --buildtype=debugoptimized -Db_sanitize=thread -Db_lundef=false \
    -Dcuda=disabled >/dev/null
fi
if ninja -C build-tsan >/dev/null; then
  TSAN_OPTIONS=second_deadlock_stack=1 \
    meson test -C build-tsan --print-errorlogs --num-processes 2 --timeout-multiplier 4 \
    --suite unit --suite kernels --suite cli --suite e2e
  logs+=("build-tsan/meson-logs/testlog.json")
else
  echo "test: the ThreadSanitizer build failed" >&2
  infra_failed=1
fi

python3 scripts/test-summary.py --infra-failures "$infra_failed" "${logs[@]}"
