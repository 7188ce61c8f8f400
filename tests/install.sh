#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `meson install` yields a usable library: headers, pkg-config file, static and shared libraries
# and the CLI; a program built with `pkg-config --cflags --libs pulseweights` runs; the shared
# library exports only pulse_* symbols (-fvisibility=hidden).
set -u
build=${PULSE_BUILD:?PULSE_BUILD is not set}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
DESTDIR="$tmp/root" meson install -C "$build" --quiet --no-rebuild >"$tmp/install.log" 2>&1 \
  || { cat "$tmp/install.log"; echo "FAIL: meson install"; exit 1; }
pc=$(find "$tmp/root" -name pulseweights.pc | head -1)
[ -n "$pc" ] || { echo "FAIL: no pulseweights.pc installed"; exit 1; }
prefix=$(sed -n 's/^prefix=//p' "$pc")
for f in bin/pulse include/pulseweights.h include/pulseweights/patch.h; do
  [ -e "$tmp/root$prefix/$f" ] || { echo "FAIL: $prefix/$f not installed"; fail=1; }
done
so=$(find "$tmp/root" -name 'libpulseweights.so*' -type f | head -1)
a=$(find "$tmp/root" -name 'libpulseweights.a' | head -1)
[ -n "$so" ] && [ -n "$a" ] || { echo "FAIL: shared or static library missing"; exit 1; }

others=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBR]$/ {print $3}' | grep -v '^pulse_' || true)
[ -z "$others" ] || { echo "FAIL: exported symbols outside pulse_*: $(echo $others | head -c 300)"; fail=1; }

cat >"$tmp/use.c" <<'C'
#include <pulseweights.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    pulse_ckpt *c = NULL;
    int r = pulse_ckpt_open(&c, "/nonexistent/model.safetensors", PULSE_CKPT_READ);
    printf("%s | %s\n", pulse_strerror(r), pulse_last_error());
    return r == PULSE_ERR_IO || r == PULSE_ERR_NOTFOUND ? 0 : 1;
}
C
export PKG_CONFIG_SYSROOT_DIR="$tmp/root" PKG_CONFIG_PATH=$(dirname "$pc")
# shellcheck disable=SC2046
if cc -o "$tmp/use" "$tmp/use.c" $(pkg-config --cflags --libs pulseweights) 2>"$tmp/cc.log"; then
  out=$(LD_LIBRARY_PATH=$(dirname "$so") "$tmp/use") || { echo "FAIL: program against the shared library: $out"; fail=1; }
  grep -q nonexistent <<<"$out" || { echo "FAIL: error detail does not name the file: $out"; fail=1; }
else
  cat "$tmp/cc.log"; echo "FAIL: could not build against the installed headers and library"; fail=1
fi
[ $fail -eq 0 ] && echo "install: library, headers, pkg-config and CLI usable; only pulse_* exported"
exit $fail
