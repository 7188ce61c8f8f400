#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the installed libpulseweights.a from the internal archive as ONE relocatable object whose
# hidden symbols are made local, so only the PULSE_API (default-visibility) names stay global,
# as in the shared library. Usage: static-lib.sh OUT.a IN.a OBJCOPY AR CC [CC-ARGS...]
set -eu
out=$1 in=$2 objcopy=$3 ar=$4
shift 4
obj="$out.o"
rm -f "$out" "$obj"
# -r: one relocatable object, every member of the (possibly thin) archive included, internal
# references between the folders resolved inside it; references to libc and the dependencies
# stay undefined for the final link.
"$@" -r -nostdlib -o "$obj" -Wl,--whole-archive "$in" -Wl,--no-whole-archive
"$objcopy" --localize-hidden "$obj"
"$ar" rcs "$out" "$obj"
rm -f "$obj"
