#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what pulse needs on Debian 12 (as root) — only the packages that are missing — and
# configures + builds the release tree in build/. Idempotent; used by demo.sh, test.sh and CI.
set -euo pipefail
cd "$(dirname "$0")/.."

# Build: compiler, meson, libraries. Tests: zstd/xdelta3 (benchmark baselines), Ceph RGW (the
# real S3 server), curl (presigned URL checks), python3 (fault proxy), iproute2 (ss), openssl
# (the private CA of the TLS test), libssl-dev (OpenSSL's SHA-256, the reference the tests check ours against).
packages=(gcc libc6-dev meson ninja-build pkg-config git
          libzstd-dev libsodium-dev libsqlite3-dev libcurl4-openssl-dev libexpat1-dev
          libssl-dev zstd xdelta3 curl python3 iproute2 procps openssl)
# Tests also need the Ceph RGW, and the cross compiler + qemu-user that run the NEON kernels.
if [ "${PULSE_SETUP_TESTS:-0}" = 1 ]; then
  packages+=(ceph-mon ceph-osd radosgw ceph-common
             gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
fi
# The Python bindings' tests and the PyTorch RL examples (examples/rl/): Debian's own numpy,
# PyTorch and matplotlib, imported by /usr/bin/python3 (no PyPI here); pip, setuptools and venv for
# the offline install checks of python/ (tests/python/test_packaging.sh).
if [ "${PULSE_SETUP_TESTS:-0}" = 1 ] || [ "${PULSE_SETUP_PYTHON:-0}" = 1 ]; then
  packages+=(python3-numpy python3-torch python3-matplotlib python3-pip python3-setuptools python3-venv)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing packages and not root: run as root or install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -f build/build.ninja ]; then
  meson setup build --buildtype=release >/dev/null
fi
ninja -C build >/dev/null
echo "setup: built $(pwd)/build/tools/pulse" >&2
